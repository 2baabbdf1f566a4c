#!/usr/bin/env bash
# On a GPU machine: every kernels/ correctness test compiled (TRITON_INTERPRET=0) in fp32, fp16 and bf16, then the
# benchmark sweep. Budget: under 8 minutes (tests ~3 min incl. compilation, sweep ~3 min).
# Usage: benchmarks/kernels/gpu_check.sh   (PYTHON=/path/to/python to pick the interpreter)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check.sh needs a CUDA GPU')"
export TRITON_INTERPRET=0
export KERNELS_TEST_DTYPES=float32,float16,bfloat16
status=0
timeout 330 "$PY" -m pytest -q tests/kernels -p no:cacheprovider --durations=10 || status=$?
timeout 150 "$PY" benchmarks/kernels/bench.py "$@" || status=$?
exit $status

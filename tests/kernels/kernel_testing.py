"""Shared helpers for the kernel tests: device/dtype selection and a verbose allclose (Liger style).

KERNELS_TEST_DTYPES (comma list, default "float32") widens the dtype list; benchmarks/kernels/gpu_check.sh sets it to
"float32,float16,bfloat16" on a GPU, where tests run compiled (TRITON_INTERPRET=0). Without a GPU, tests run the
Triton kernels on CPU tensors under the interpreter, which computes bf16 wrongly: fp32 only there.
"""

from __future__ import annotations

import os

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPES = [_NAMES[n.strip()] for n in os.environ.get("KERNELS_TEST_DTYPES", "float32").split(",") if n.strip()]
if DEVICE == "cpu":
    DTYPES = [torch.float32]

# (atol, rtol) for results compared against a float32/float64 reference computed from the same (rounded) inputs
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


def tol(dtype, scale: float = 1.0) -> dict:
    atol, rtol = TOL[dtype]
    return {"atol": atol * scale, "rtol": rtol * scale}


def assert_verbose_allclose(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5,
                            max_print: int = 8, name: str = "tensor") -> None:
    """assert_close that reports how many elements differ, the worst ones and where, and NaN/inf mismatches."""
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    nan_mismatch = torch.isnan(a) != torch.isnan(e)
    inf_mismatch = (torch.isinf(a) | torch.isinf(e)) & (a != e) & ~torch.isnan(a) & ~torch.isnan(e)
    finite = torch.isfinite(a) & torch.isfinite(e)
    diff = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    bad = (finite & (diff > atol + rtol * e.abs())) | nan_mismatch | inf_mismatch
    n_bad = int(bad.sum())
    if n_bad == 0:
        return
    idx = bad.nonzero()
    worst = diff[bad].argsort(descending=True)[:max_print]
    lines = [(f"{name}: {n_bad} / {a.numel()} elements differ (atol={atol:g}, rtol={rtol:g}); "
              f"max abs diff {float(diff[bad].max()):.3g}; NaN mismatches {int(nan_mismatch.sum())}, "
              f"inf mismatches {int(inf_mismatch.sum())}")]
    for w in worst.tolist():
        where = tuple(idx[w].tolist())
        lines.append(f"  at {where}: actual {float(a[where]):.8g} expected {float(e[where]):.8g}")
    raise AssertionError("\n".join(lines))

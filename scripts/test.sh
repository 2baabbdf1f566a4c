#!/usr/bin/env bash
# The whole test suite against real PostgreSQL, Redis, RabbitMQ and a SeaweedFS S3 server.
# Installs what is missing, starts what is not running, checks the contracts, runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/services.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/python scripts/gen_protos.py --check
(cd protos && ../.tools/node_modules/.bin/buf lint)
echo "buf lint: ok"
# ruff with the project's config (`make lint`): zero findings, or the run stops here.
.venv/bin/ruff check --quiet .
echo "ruff: ok"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"

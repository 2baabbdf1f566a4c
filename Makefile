# The two set-up commands of the README.
.PHONY: demo test protos lint

# Install, start the whole platform on embedded defaults (PostgreSQL, Redis, SeaweedFS, services, a worker),
# run the end-to-end demo through the public gRPC API, and stop everything.
demo:
	scripts/bootstrap.sh
	HF_HUB_OFFLINE=1 .venv/bin/praxon demo

# Install, start what the tests need, and run every test against the real services.
test:
	scripts/test.sh

# ruff with the project's config (pyproject.toml [tool.ruff]); zero findings is the bar. scripts/test.sh runs it too.
lint:
	.venv/bin/ruff check .

protos:
	.venv/bin/python scripts/gen_protos.py
	cd protos && ../.tools/node_modules/.bin/buf lint

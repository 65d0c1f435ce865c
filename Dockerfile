# hyperfleet image: the CLI, the trial runtime and the dashboard. CPU torch by default;
# build with --build-arg TORCH_SPEC=... for a CUDA build.
FROM python:3.11-slim
ARG TORCH_SPEC=torch==2.13.0
WORKDIR /app
COPY pyproject.toml README.md ./
COPY hyperfleet ./hyperfleet
COPY examples ./examples
RUN pip install --no-cache-dir "$TORCH_SPEC" && pip install --no-cache-dir -e ".[postgres]"
ENTRYPOINT ["hyperfleet"]

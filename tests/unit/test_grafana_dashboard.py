"""deploy/: the Grafana dashboard draws only metrics the code exports; Prometheus scrapes them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import api.served  # noqa: F401 - registers memory_context_served_records_total
from core import metrics  # noqa: F401 - registers the shared metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "memory-agent.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exported_series() -> set[str]:
    """Every series name the code's memory_* metrics expose."""
    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("memory_"):
            names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def test_every_panel_queries_metrics_the_code_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series()
    used = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "memory-agent-prometheus"
            names = set(re.findall(r"\bmemory_[a-z_]+\b", target["expr"]))
            assert names, target["expr"]
            assert names <= exported, (panel["title"], names - exported)
            used |= names
    # What operators asked for (issue 27): lag, settled messages, context latency, model calls, dead letters.
    for wanted in ("memory_consumer_lag_records", "memory_projected_events_total", "memory_context_latency_seconds_bucket",
                   "memory_llm_latency_seconds_count", "memory_embedding_model_calls_total",
                   "memory_embedding_model_failures_total", "memory_dead_letters_total"):
        assert wanted in used, wanted


def test_panels_have_unique_ids_and_the_provisioned_datasource() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    source = yaml.safe_load((REPO / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert source["datasources"][0]["uid"] == "memory-agent-prometheus"
    provider = yaml.safe_load((REPO / "deploy/grafana/provisioning/dashboards/memory-agent.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_prometheus_scrapes_the_api_and_the_worker_ports_of_the_compose_file() -> None:
    scrape = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    targets = {t for job in scrape["scrape_configs"] for group in job["static_configs"] for t in group["targets"]}
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    worker_port = compose["services"]["worker"]["environment"]["MEMORY_WORKER__METRICS_PORT"]
    assert targets == {"api:8080", f"worker:{worker_port}"}

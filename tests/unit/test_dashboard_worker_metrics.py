"""The worker's Prometheus text reduced for the dashboard."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from api.ui.worker_metrics import summarize


def test_counters_gauges_and_histograms_of_the_memory_metrics_only():
    registry = CollectorRegistry()
    Counter("memory_dead_letters_total", "letters", ["stage", "reason"], registry=registry).labels(
        "projector.facts", "not_owner").inc(3)
    Gauge("memory_consumer_lag_records", "lag", ["consumer", "partition"], registry=registry).labels("agents", "0").set(7)
    latency = Histogram("memory_llm_latency_seconds", "latency", ["operation", "outcome"], registry=registry)
    latency.labels("summary", "ok").observe(1.0)
    latency.labels("summary", "ok").observe(3.0)
    Counter("python_other_total", "not ours", registry=registry).inc()

    found = {m["name"]: m for m in summarize(generate_latest(registry).decode())}
    assert set(found) == {"memory_dead_letters", "memory_consumer_lag_records", "memory_llm_latency_seconds"}
    assert found["memory_dead_letters"]["samples"] == [
        {"labels": {"stage": "projector.facts", "reason": "not_owner"}, "value": 3.0}]
    assert found["memory_consumer_lag_records"]["samples"] == [
        {"labels": {"consumer": "agents", "partition": "0"}, "value": 7.0}]
    assert found["memory_llm_latency_seconds"]["samples"] == [
        {"labels": {"operation": "summary", "outcome": "ok"}, "count": 2.0, "sum": 4.0, "mean": 2.0}]

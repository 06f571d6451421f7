"""The worker process serves its Prometheus metrics; after traffic they carry values."""

from __future__ import annotations

from collections import defaultdict

import httpx
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from runtime.client import MemoryClient
from tests.integration.conftest import free_port, wait_until, worker_process

MESSAGES = 8


async def scrape(port: int) -> dict[str, list[tuple[dict, float]]]:
    """Samples by name: [(labels, value)]."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name].append((sample.labels, sample.value))
    return samples


async def test_worker_metrics_are_served_with_values_after_traffic(settings):
    port = free_port()
    env = {"MEMORY_WORKER__METRICS_PORT": str(port), "MEMORY_WORKER__LAG_INTERVAL_S": "0.5"}
    async with MemoryClient(settings) as client:
        for seq in range(MESSAGES):
            await client.append_message(tenant_id="tenant-a", conversation_id="c-metrics", user_id="alice", seq=seq,
                                        role="user" if seq % 2 == 0 else "assistant",
                                        content=f"Message {seq}: we keep the router config in git and test on staging.")
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await producer.start()
    try:
        await producer.send_and_wait(settings.kafka.conversation_topic, b"\xff not an event", key=b"tenant-a/c-bad")
    finally:
        await producer.stop()

    async with worker_process(settings, extra_env=env, log_name="metrics-worker") as worker:
        samples: dict = {}

        async def traffic_seen() -> bool:
            nonlocal samples
            if worker.returncode is not None:
                raise AssertionError(open(worker.log_path).read()[-3000:])
            try:
                samples = await scrape(port)
            except httpx.HTTPError:
                return False
            projected = sum(v for labels, v in samples.get("memory_projected_events_total", [])
                            if labels["projector"] == "messages")
            lag = [v for labels, v in samples.get("memory_consumer_lag_records", [])
                   if labels["consumer"] == "projector:messages"]
            summaries = sum(v for labels, v in samples.get("memory_llm_latency_seconds_count", [])
                            if labels["operation"] == "summary")
            letters = sum(v for _, v in samples.get("memory_dead_letters_total", []))
            # A consumer group shows up once it has committed (faust commits on an interval), so its
            # gauge is awaited, not expected at the moment the messages projector caught up.
            groups = any(labels["consumer"].startswith("group:")
                         for labels, _ in samples.get("memory_consumer_lag_records", []))
            return projected >= MESSAGES and lag and sum(lag) == 0 and summaries >= 1 and letters >= 1 and groups

        await wait_until(traffic_seen, 240, "projected messages, zero lag, a summary, a dead letter and a consumer "
                         "group's lag in /metrics")
    assert {labels["partition"].rsplit("/", 1)[0] for labels, _ in samples["memory_consumer_lag_records"]} >= \
        {settings.kafka.conversation_topic}
    assert any(labels["consumer"].startswith("group:") for labels, _ in samples["memory_consumer_lag_records"])
    assert "memory_summaries_in_flight" in samples and samples["memory_summaries_in_flight"][0][1] >= 0
    assert all(value >= 0 for _, value in samples["memory_consumer_lag_records"])

"""The worker's Prometheus endpoint and its consumer-lag gauge.

`memory_consumer_lag_records{consumer, partition}` = the log end offset minus where a consumer
stands: each projector's stored offsets (PostgreSQL, written with its rows) and the committed
offsets of this generation's consumer groups (the stream agents and the stages). The projectors'
Kafka groups are left out: their commits only mirror the stored offsets, and a group a regrouping
retired would show a lag that grows until Kafka expires its offsets (docs/scaling.md, "The LLM
client's CPU and one consumer for the lingering projectors").
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition
from prometheus_client import start_http_server

from core import metrics
from core.settings import Settings

log = logging.getLogger(__name__)


def serve_metrics(settings: Settings) -> int | None:
    """Start the /metrics HTTP server of this process (a daemon thread); its port, or None when
    `worker.metrics_port` is 0. A port another process holds (a second worker, another deployment)
    is not shared: the server takes a free port instead and says which, loudly."""
    if not settings.worker.metrics_port:
        return None
    kafka = settings.kafka
    metrics.DEPLOYMENT.labels(metrics.deployment_id(kafka.bootstrap_servers, kafka.topic_prefix), kafka.topic_prefix,
                              settings.generation).set(1)
    host, wanted = settings.worker.metrics_host, settings.worker.metrics_port
    try:
        server, _ = start_http_server(wanted, addr=host)
    except OSError as exc:
        server, _ = start_http_server(0, addr=host)
        log.warning("worker metrics: port %d is taken (%s); serving on http://%s:%d/metrics instead. Give each"
                    " worker process its own MEMORY_WORKER__METRICS_PORT (the dashboard and Prometheus read the"
                    " configured one)", wanted, exc.strerror or exc, host, server.server_port)
        return server.server_port
    port = server.server_port
    log.info("worker metrics at http://%s:%d/metrics", host, port)
    return port


async def _projector_positions(settings: Settings) -> dict[str, dict[TopicPartition, int]]:
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True,
                                                     connect_timeout=10) as conn:
        cur = await conn.execute(f'SELECT projector, topic, partition, next_offset FROM "{settings.pg_schema}"'
                                 ".projector_offsets")
        positions: dict[str, dict[TopicPartition, int]] = {}
        for projector, topic, partition, offset in await cur.fetchall():
            positions.setdefault(f"projector:{projector}", {})[TopicPartition(topic, partition)] = offset
        return positions


async def _group_positions(settings: Settings) -> dict[str, dict[TopicPartition, int]]:
    prefix = f"{settings.kafka.topic_prefix}.{settings.generation}."
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        groups = [g[0] for g in await admin.list_consumer_groups()
                  if g[0].startswith(prefix) and not g[0].startswith((f"{prefix}projector.", f"{prefix}projectors."))]
        positions = {}
        for group in sorted(groups):
            committed = await admin.list_consumer_group_offsets(group)
            positions[f"group:{group}"] = {tp: m.offset for tp, m in committed.items() if m.offset >= 0}
        return positions
    finally:
        await admin.close()


async def consumer_lag(settings: Settings) -> dict[tuple[str, str], int]:
    """(consumer, "topic/partition") -> records behind the end of that partition."""
    positions = {**await _projector_positions(settings), **await _group_positions(settings)}
    partitions = sorted({tp for stored in positions.values() for tp in stored})
    if not partitions:
        return {}
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    return {(name, f"{tp.topic}/{tp.partition}"): max(0, ends[tp] - offset)
            for name, stored in positions.items() for tp, offset in stored.items() if tp in ends}


async def report_lag(settings: Settings) -> None:
    """Refresh the consumer-lag gauge every `worker.lag_interval_s` until cancelled; a failed
    refresh (Kafka or PostgreSQL down) is logged and tried again."""
    while True:
        try:
            for (name, partition), lag in (await consumer_lag(settings)).items():
                metrics.CONSUMER_LAG.labels(consumer=name, partition=partition).set(lag)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a metric never stops the worker
            log.warning("consumer lag not refreshed: %s: %s", type(exc).__name__, exc)
        await asyncio.sleep(settings.worker.lag_interval_s)

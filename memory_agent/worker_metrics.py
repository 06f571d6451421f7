"""The worker's Prometheus endpoint and its consumer-lag gauge.

`memory_consumer_lag_records{consumer, partition}` = the log end offset minus where a consumer
stands: each projector's stored offsets (PostgreSQL, written with its rows) and the committed
offsets of this generation's consumer groups (the stream agents and the stages).
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


class LagReader:
    """What the lag gauge reads, through clients kept for the process: one PostgreSQL connection,
    one Kafka admin client, one consumer (without a group: it only asks for end offsets). Building
    an admin client and a consumer at every refresh cost a bootstrap and a metadata round each time
    (docs/scaling.md, the worker's idle cost). A refresh that fails closes them; the next opens
    them again (Kafka or PostgreSQL back)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._conn: psycopg.AsyncConnection | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self.opened = 0  # times the clients were (re)built: once while nothing fails

    async def lag(self) -> dict[tuple[str, str], int]:
        """(consumer, "topic/partition") -> records behind the end of that partition."""
        try:
            return await self._lag()
        except BaseException:
            await self.close()
            raise

    async def _lag(self) -> dict[tuple[str, str], int]:
        if self._conn is None:
            self.opened += 1
        positions = {**await self._projector_positions(), **await self._group_positions()}
        partitions = sorted({tp for stored in positions.values() for tp in stored})
        if not partitions:
            return {}
        if self._consumer is None:
            self._consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.kafka.bootstrap_servers)
            await self._consumer.start()
        ends = await self._consumer.end_offsets(partitions)
        return {(name, f"{tp.topic}/{tp.partition}"): max(0, ends[tp] - offset)
                for name, stored in positions.items() for tp, offset in stored.items() if tp in ends}

    async def _projector_positions(self) -> dict[str, dict[TopicPartition, int]]:
        if self._conn is None:
            self._conn = await psycopg.AsyncConnection.connect(self.settings.postgres.dsn, autocommit=True,
                                                               connect_timeout=10)
        cur = await self._conn.execute(f'SELECT projector, topic, partition, next_offset FROM "{self.settings.pg_schema}"'
                                       ".projector_offsets")
        positions: dict[str, dict[TopicPartition, int]] = {}
        for projector, topic, partition, offset in await cur.fetchall():
            positions.setdefault(f"projector:{projector}", {})[TopicPartition(topic, partition)] = offset
        return positions

    async def _group_positions(self) -> dict[str, dict[TopicPartition, int]]:
        prefix = f"{self.settings.kafka.topic_prefix}.{self.settings.generation}."
        if self._admin is None:
            self._admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka.bootstrap_servers)
            await self._admin.start()
        groups = [g[0] for g in await self._admin.list_consumer_groups() if g[0].startswith(prefix)]
        positions = {}
        for group in sorted(groups):
            committed = await self._admin.list_consumer_group_offsets(group)
            positions[f"group:{group}"] = {tp: m.offset for tp, m in committed.items() if m.offset >= 0}
        return positions

    async def close(self) -> None:
        conn, admin, consumer = self._conn, self._admin, self._consumer
        self._conn = self._admin = self._consumer = None
        for close in (conn and conn.close, admin and admin.close, consumer and consumer.stop):
            if close is not None:
                try:
                    await close()
                except Exception:  # noqa: BLE001 - closing what already failed
                    pass


async def consumer_lag(settings: Settings) -> dict[tuple[str, str], int]:
    """(consumer, "topic/partition") -> records behind the end of that partition, with clients of
    its own (closed after)."""
    reader = LagReader(settings)
    try:
        return await reader.lag()
    finally:
        await reader.close()


async def report_lag(settings: Settings, reader: LagReader | None = None) -> None:
    """Refresh the consumer-lag gauge every `worker.lag_interval_s` until cancelled, through one
    `LagReader` for the process; a failed refresh (Kafka or PostgreSQL down) is logged and tried
    again."""
    reader = reader or LagReader(settings)
    try:
        while True:
            try:
                for (name, partition), lag in (await reader.lag()).items():
                    metrics.CONSUMER_LAG.labels(consumer=name, partition=partition).set(lag)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a metric never stops the worker
                log.warning("consumer lag not refreshed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(settings.worker.lag_interval_s)
    finally:
        await reader.close()

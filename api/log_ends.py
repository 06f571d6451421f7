"""Whether the messages projection already holds everything the log had for a conversation's
partition: an unknown conversation asked for with `min_seq` answers 404 as soon as that is so,
instead of waiting out `wait_ms` (issue 11), while a conversation whose first messages are in
the log but not projected yet is still waited for (read your writes).

The end offset of the conversation's partition is read once per request (Kafka's ListOffsets,
on a consumer without a group, started on first use; the partition as the producers' default
partitioner picks it); the messages projector's position for
that partition is in PostgreSQL (`projector_offsets`, stored with the rows). When Kafka cannot
be asked, the answer is "unknown" and the caller waits as before.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import DefaultPartitioner

from core.settings import Settings
from projections.messages import MessagesProjector

log = logging.getLogger(__name__)
_ASK_TIMEOUT_S = 2.0


class LogEnds:
    """End offsets of the conversation topic's partitions, asked lazily; never raises."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()
        self._partitioner = DefaultPartitioner()
        self._partitions: list[int] = []

    async def end_of(self, key: bytes) -> tuple[TopicPartition, int] | None:
        """(partition, end offset) for the conversation with this Kafka key; None when Kafka
        cannot say (down, or the topic does not exist)."""
        topic = self.settings.kafka.conversation_topic
        try:
            consumer, partitions = await self._start()
            if not partitions:
                return None
            tp = TopicPartition(topic, self._partitioner(key, partitions, partitions))
            ends = await asyncio.wait_for(consumer.end_offsets([tp]), _ASK_TIMEOUT_S)
            return tp, ends[tp]
        except Exception as exc:  # noqa: BLE001 - "cannot say": the caller waits as before
            log.debug("log end offsets unavailable: %s: %s", type(exc).__name__, exc)
            await self.close()
            return None

    async def _start(self) -> tuple[AIOKafkaConsumer, list[int]]:
        """The consumer, and the topic's partitions (described once: a keyed topic's partition
        count is fixed, docs/scaling.md)."""
        async with self._lock:
            if not self._partitions:
                self._partitions = await asyncio.wait_for(self._describe(), _ASK_TIMEOUT_S * 2)
            if self._consumer is None:
                consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.kafka.bootstrap_servers,
                                            enable_auto_commit=False, request_timeout_ms=5000)
                try:
                    await asyncio.wait_for(consumer.start(), _ASK_TIMEOUT_S * 2)
                except BaseException:
                    await consumer.stop()
                    raise
                self._consumer = consumer
            return self._consumer, self._partitions

    async def _describe(self) -> list[int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka.bootstrap_servers, request_timeout_ms=5000)
        await admin.start()
        try:
            described = await admin.describe_topics([self.settings.kafka.conversation_topic])
        finally:
            await admin.close()
        return sorted(p["partition"] for t in described if t["error_code"] == 0 for p in t["partitions"])

    async def close(self) -> None:
        async with self._lock:
            if self._consumer is not None:
                consumer, self._consumer = self._consumer, None
                try:
                    await consumer.stop()
                except Exception:  # noqa: BLE001 - closing a broken client
                    pass

async def projected_through(conn: psycopg.AsyncConnection, tp: TopicPartition, end: int) -> bool:
    """True when the messages projector's stored position for `tp` reached `end`."""
    row = await (await conn.execute(
        "SELECT next_offset FROM projector_offsets WHERE projector = %s AND topic = %s AND partition = %s",
        (MessagesProjector.name, tp.topic, tp.partition))).fetchone()
    return end == 0 or (row is not None and row[0] >= end)

"""Where a generation stands against the end of the log: Kafka end offsets vs. the positions
its stream processor committed and its projectors stored (replay status, /readyz, stats)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from core.settings import Settings
from projections import generations
from projections.catalog import projectors
from runtime.kafka_topics import agents_group


def generation_settings(settings: Settings, name: str, replay_until: datetime | None = None) -> Settings:
    return settings.model_copy(update={"generation": name, "replay_until": replay_until})



@dataclass(frozen=True)
class Progress:
    generation: str
    total: int  # events in the conversation log
    projected: int  # of them applied by the slowest of the generation's projectors that read it
    folded: int  # of them committed by the generation's stream agents
    derived_total: int  # events in the generation's memory topic
    derived_projected: int  # of them applied by the slowest of its projectors that read it
    # Records still ahead of each part that is not caught up ("agents": the stream agents on
    # the log; a projector: both topics it reads). Empty when caught up.
    behind: dict[str, int] = field(default_factory=dict)
    messages_projected: int = 0  # log events the messages projector alone applied (what reads see)

    @property
    def processed(self) -> int:
        return min(self.projected, self.folded)

    @property
    def caught_up(self) -> bool:
        return self.processed >= self.total and self.derived_projected >= self.derived_total

    def as_dict(self) -> dict:
        return {**vars(self), "processed": self.processed, "caught_up": self.caught_up}


async def progress(settings: Settings, name: str) -> Progress:
    """Where a generation stands against the end of the log (Kafka end offsets vs. its positions).

    Every projector the generation's worker runs counts, including one that has stored no
    position yet (it stands at 0): a generation is not caught up while any of them is behind."""
    kafka = settings.kafka
    source, derived = kafka.conversation_topic, kafka.memory_topic(name)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    await consumer.start()
    await admin.start()
    try:
        ends = {}
        for topic in (source, derived):
            partitions = consumer.partitions_for_topic(topic) or set()
            if not partitions:
                await consumer._client.force_metadata_update()  # noqa: SLF001 - fresh topic
                partitions = consumer.partitions_for_topic(topic) or set()
            ends.update(await consumer.end_offsets([TopicPartition(topic, p) for p in partitions]))
        committed = await admin.list_consumer_group_offsets(agents_group(generation_settings(settings, name)))
    finally:
        await consumer.stop()
        await admin.close()
    stored, expected = await asyncio.to_thread(_positions_and_projectors, settings, name)
    total = sum(o for tp, o in ends.items() if tp.topic == source)
    folded = sum(m.offset for tp, m in committed.items() if tp.topic == source and m.offset >= 0)
    return Progress(
        generation=name,
        total=total,
        projected=slowest(stored, expected, ends, source),
        folded=folded,
        derived_total=sum(o for tp, o in ends.items() if tp.topic == derived),
        derived_projected=slowest(stored, expected, ends, derived),
        behind={k: v for k, v in {"agents": max(0, total - folded), **behind(stored, expected, ends)}.items() if v > 0},
        messages_projected=slowest(stored, {"messages": [source]}, ends, source),
    )


def behind(stored: dict[str, dict[TopicPartition, int]], expected: dict[str, list[str]],
           ends: dict[TopicPartition, int]) -> dict[str, int]:
    """Records each expected projector has still to apply, over the topics it reads."""
    return {p: sum(max(0, end - stored.get(p, {}).get(tp, 0)) for tp, end in ends.items() if tp.topic in topics)
            for p, topics in expected.items()}


def slowest(stored: dict[str, dict[TopicPartition, int]], expected: dict[str, list[str]],
            ends: dict[TopicPartition, int], topic: str) -> int:
    """Records of `topic` (up to its end) that every projector reading it has applied: the
    expected projectors, at 0 where they stored nothing. (A position stored by a projector the
    worker no longer runs does not count: it would never move.)"""
    readers = {p for p, topics in expected.items() if topic in topics}
    partitions = [tp for tp in ends if tp.topic == topic]
    totals = [sum(min(stored.get(p, {}).get(tp, 0), ends[tp]) for tp in partitions) for p in readers]
    return min(totals, default=sum(ends[tp] for tp in partitions))


def expected_projectors(settings: Settings, name: str, config: dict) -> dict[str, list[str]]:
    """The projectors a worker of generation `name` runs, and the topics each reads. A replay
    generation records its systems; for another (the first one) the given settings say."""
    update: dict = {"generation": name}
    if "systems" in config:
        update["systems"] = config["systems"]
    if "index_messages" in config:
        update["retrieval"] = settings.retrieval.model_copy(update={"index_messages": config["index_messages"]})
    generation = settings.model_copy(update=update)
    return {p.name: list(p.topics(generation)) for p in projectors(generation)}


def _positions_and_projectors(
    settings: Settings, name: str
) -> tuple[dict[str, dict[TopicPartition, int]], dict[str, list[str]]]:
    stored: dict[str, dict[TopicPartition, int]] = {}
    with psycopg.connect(settings.postgres.dsn) as conn:
        try:
            rows = conn.execute(
                psycopg.sql.SQL("SELECT projector, topic, partition, next_offset FROM {}.projector_offsets").format(
                    psycopg.sql.Identifier(f"gen_{name}")
                )
            ).fetchall()
        except psycopg.errors.UndefinedTable:
            rows = []
            conn.rollback()
        try:
            config = generations.get_generation(conn, settings.kafka.topic_prefix, name).config
        except generations.GenerationError:
            config = {}
    for projector, topic, partition, offset in rows:
        stored.setdefault(projector, {})[TopicPartition(topic, partition)] = offset
    return stored, expected_projectors(settings, name, config)

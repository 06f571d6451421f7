"""Upgrade: the fold states of the per-system agents (before the conversation processor) carried over.

Before the processor, each memory system had its own faust agent and table: `window-state`,
`chunk-state` and `topic-state`, each changelog holding one system's state per conversation in
the very bytes its slice's codec writes now. The processor keeps them in one record per
conversation (`conversation-state`, streams/processor.py) and resumes from the same consumer
group, so a deployment that ran the old agents would otherwise start every conversation afresh
in the middle of its log. Before the worker starts the processor, `carry_over` reads the old
changelogs to their end and writes each conversation's states, framed, into the new changelog
(same partitions: the tables are co-partitioned with the log), once: only while the new
changelog does not exist yet. docs/backbone.md, "Upgrading to the conversation processor".
"""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from memory_agent.batch_replay.produce import send_all
from core.settings import Settings
from runtime.kafka_topics import TopicSpec, changelog_topic, ensure_topics
from streams.processor import CONVERSATION_TABLE
from streams.slice import pack

log = logging.getLogger(__name__)

# The tables of the agents the processor replaced, by the slice whose state each held.
LEGACY_TABLES = {"window": "window-state", "facts": "chunk-state", "topics": "topic-state"}


async def carry_over(settings: Settings) -> int:
    """Write the old agents' last states into the processor's changelog if it is new; returns
    the number of conversations carried over (0: nothing to do)."""
    target = changelog_topic(settings, CONVERSATION_TABLE)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
    finally:
        await admin.close()
    legacy = {name: changelog_topic(settings, table) for name, table in LEGACY_TABLES.items()
              if name in settings.systems and changelog_topic(settings, table) in existing}
    if target in existing or not legacy:
        return 0
    states = await _last_states(settings, legacy)
    await ensure_topics(settings, [TopicSpec(target, settings.kafka.partitions, {"cleanup.policy": "compact"})])
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all",
                                enable_idempotence=True)
    await producer.start()
    try:
        for partition, conversations in sorted(states.items()):
            await send_all(producer, target, partition, ((key, pack(parts)) for key, parts in conversations.items()))
    finally:
        await producer.stop()
    count = sum(len(conversations) for conversations in states.values())
    log.warning("upgrade: carried the states of %d conversations over from %s into %s", count,
                sorted(legacy.values()), target)
    return count


async def _last_states(settings: Settings, legacy: dict[str, str]) -> dict[int, dict[bytes, dict[str, bytes]]]:
    """Per partition, per conversation key: each slice's newest state (a deleted one left out)."""
    out: dict[int, dict[bytes, dict[str, bytes]]] = {}
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        for name, topic in legacy.items():
            partitions = [TopicPartition(topic, p) for p in range(settings.kafka.partitions)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)
            while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
                for tp, records in (await consumer.getmany(*partitions, timeout_ms=1000)).items():
                    for record in records:
                        if record.offset >= ends[tp] or record.key is None:
                            continue
                        parts = out.setdefault(tp.partition, {}).setdefault(record.key, {})
                        if record.value:
                            parts[name] = record.value
                        else:
                            parts.pop(name, None)
    finally:
        await consumer.stop()
    return {p: {key: parts for key, parts in conversations.items() if parts} for p, conversations in out.items()}

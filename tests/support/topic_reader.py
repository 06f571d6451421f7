"""Every record of every topic of a test's prefix, read as the service reads it (sealed text
opened by the process's key store; a record nobody can open any more is unreadable), or raw."""

from __future__ import annotations

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from schemas.codec import decode
from schemas.envelope import InvalidEvent


async def topic_residue(settings, marker: str, *, raw: bool = False) -> dict[str, int]:
    """Records holding `marker` per topic of the test's prefix (conversation log, memory topics of
    every generation, context-served, dead letters, faust changelogs), each read as the service
    reads it: decoded by schemas.codec (sealed text opened; a record whose key is destroyed is
    skipped: "erased"), and anything that is not an event (changelogs, letters) as its raw bytes;
    `raw`: the bytes only (what a reader without the keys sees)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        names = sorted(t for t in await admin.list_topics() if t.startswith(settings.kafka.topic_prefix + "."))
        described = await admin.describe_topics(names)
    finally:
        await admin.close()
    assert settings.kafka.conversation_topic in names and settings.kafka.memory_topic(settings.generation) in names
    partitions = [TopicPartition(t["topic"], p["partition"]) for t in described for p in t["partitions"]]
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    found: dict[str, int] = {}
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        left = {tp: end for tp, end in (await consumer.end_offsets(partitions)).items() if end > 0}
        while left:
            for tp, records in (await consumer.getmany(timeout_ms=2000)).items():
                for record in records:
                    text = bytes(record.value or b"").decode("utf-8", "replace") if raw else readable(record)
                    if marker in text:
                        found[tp.topic] = found.get(tp.topic, 0) + 1
                    if record.offset + 1 >= left.get(tp, 0):
                        left.pop(tp, None)
    finally:
        await consumer.stop()
    return found


def readable(record) -> str:
    """A record's text as the service's decode gives it."""
    if record.value is None:
        return ""
    try:
        event = decode(record.value, key=record.key)
    except InvalidEvent as exc:
        if exc.reason == "erased":
            return ""  # nobody can open it
        return record.value.decode("utf-8", "replace")
    return orjson.dumps(event.payload.model_dump(mode="json")).decode() + record.value.decode("utf-8", "replace")

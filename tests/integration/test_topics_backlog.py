"""Issue 16: a burst far faster than embeddings (one long conversation and a few short ones,
all in the log before the worker starts) ends with every message in a topic or an archive
and none in topic_unassigned; the fold deferred what it could not hold and read it back."""

from __future__ import annotations

from collections import Counter

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from memory_agent.client import MemoryClient
from schemas.codec import peek_type
from streams.topics import agents_group
from streams.topics_memory.archive import decompress_bytes
from tests.integration.conftest import scalar, wait_until, worker_process
from tests.support.topic_subjects import conversation

LONG, SHORT = 2_000, 150
CONVERSATIONS = {"burst-long": LONG, "burst-a": SHORT, "burst-b": SHORT, "burst-c": SHORT}
WORKER_ENV = {"MEMORY_SYSTEMS": '["topics"]'}  # the topic agents and every projector, nothing else


def chat(length: int) -> list[tuple[str, str]]:
    """(role, content) x length: the labelled six-subject chat, repeated (numbered so no two
    messages are the same text)."""
    turns = conversation()
    return [(turns[i % len(turns)][1], f"{turns[i % len(turns)][2]} (#{i})") for i in range(length)]


async def events_of(settings, topic: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) on `topic` right now."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic)
                                                         or await _partitions(consumer, topic))]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records = []
        while any(await consumer.position(tp) < ends[tp] for tp in partitions):
            for batch in (await consumer.getmany(timeout_ms=1000)).values():
                records += [(r.key, r.value) for r in batch]
        return records
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()  # noqa: SLF001 - the topic may be new to this client
    return consumer.partitions_for_topic(topic) or set()


@pytest.mark.asyncio
async def test_a_burst_of_thousands_places_every_message_and_gives_none_up(settings):
    async with MemoryClient(settings) as client:
        for conversation_id, length in CONVERSATIONS.items():
            for seq, (role, content) in enumerate(chat(length)):
                await client.enqueue(client.message_event(
                    tenant_id="tenant-a", conversation_id=conversation_id, user_id="alice", seq=seq, role=role,
                    content=content))
        await client.flush()
    total = sum(CONVERSATIONS.values())

    async def placed() -> int:
        active = await scalar(settings, "SELECT count(*) FROM topic_messages")
        archived = await scalar(settings, "SELECT coalesce(sum(message_count), 0) FROM topic_archives")
        return int(active) + int(archived)

    async with worker_process(settings, extra_env=WORKER_ENV, log_name="topics-burst") as worker:
        async def all_placed() -> bool:
            if worker.returncode is not None:
                raise AssertionError(f"the worker exited (log {worker.log_path})")
            return await placed() >= total

        try:
            await wait_until(all_placed, timeout=1_500, what=f"{total} messages placed (log {worker.log_path})")
        except AssertionError:
            raise AssertionError(f"{await placed()} of {total} placed; unassigned "
                                 f"{await scalar(settings, 'SELECT count(*) FROM topic_unassigned')}"
                                 f" (log {worker.log_path})") from None

    assert await scalar(settings, "SELECT count(*) FROM topic_unassigned") == 0
    for conversation_id, length in CONVERSATIONS.items():
        active = await scalar(settings, "SELECT coalesce(array_agg(seq), '{}') FROM topic_messages"
                                        " WHERE conversation_id = %s", (conversation_id,))
        archives = await scalar(settings, "SELECT coalesce(array_agg(archive), '{}') FROM topic_archives"
                                          " WHERE conversation_id = %s", (conversation_id,))
        archived = [m.seq for archive in archives for m in decompress_bytes(bytes(archive))]
        assert sorted(active + archived) == list(range(length)), conversation_id  # each message once
        last = await scalar(settings, "SELECT last_seq FROM topic_conversations WHERE conversation_id = %s",
                            (conversation_id,))
        assert last == length - 1

    # The back-pressure path was taken (not a lucky race) and the fold's state stayed small.
    memory = Counter(peek_type(value) for _, value in await events_of(settings, settings.kafka.memory_topic(
        settings.generation)))
    assert memory["topic.backlog_requested"] >= 1 and memory["topic.message_recalled"] >= 1_000, memory
    assert memory["topic.message_unassigned"] == 0
    changelog = f"{agents_group(settings)}-topic-state-changelog"
    largest = max(len(value or b"") for _, value in await events_of(settings, changelog))
    print(f"\nburst: {total} messages, {memory['topic.backlog_requested']} backlog reads, "
          f"{memory['topic.message_recalled']} recalled; largest state record {largest:,} B")
    assert largest < 512 * 1024


"""Issue 16: a burst far faster than embeddings (one long conversation and a few short ones,
all in the log before the worker starts) ends with every message in a topic or an archive
and none in topic_unassigned (before issue 22 the fold deferred what it could not hold and read
it back; now it is given each vector before it takes the message: no deferral is needed)."""

from __future__ import annotations

from collections import Counter

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.client import MemoryClient
from schemas.codec import peek_type
from runtime.kafka_topics import agents_group
from domain.topics.archive import decompress_bytes
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
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
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

    # Since issue 22 the fold is given each message's vector before it takes the message, so a burst
    # no longer outruns the embeddings: nothing waits in the inbox, no request/answer pair goes
    # through the log and the back-pressure path (deferral, backlog reads) is not needed; that path is
    # still tested below (the recall stage) and in tests/unit (the inbox). The state stayed small.
    memory = Counter(peek_type(value) for _, value in await events_of(settings, settings.kafka.memory_topic(
        settings.generation)))
    assert memory["topic.embedding_requested"] == 0 and memory["topic.message_embedded"] == 0, memory
    assert memory["topic.message_assigned"] >= total, memory
    assert memory["topic.message_unassigned"] == 0
    changelog = f"{agents_group(settings)}-conversation-state-changelog"  # the topic fold's state is a slice of it
    largest = max(len(value or b"") for _, value in await events_of(settings, changelog))
    print(f"\nburst: {total} messages, {memory['topic.backlog_requested']} backlog reads, "
          f"{memory['topic.message_recalled']} recalled; largest state record {largest:,} B")
    assert largest < 512 * 1024



# --- the recall stage alone, on the real messages table ------------------------------------------

async def insert_messages(settings, rows: list[tuple[int, str, str]]) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True
    ) as conn:
        for seq, role, content in rows:
            await conn.execute(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, subject_id, role, content,"
                " metadata, occurred_at, source_partition, source_offset) VALUES ('t', 'c', %s, %s, 'alice', NULL,"
                " %s, %s, %s, now(), 0, %s)",
                (seq, f"e{seq}", role, content, '{"importance": 0.9}' if seq == 2 else "{}", seq))


def backlog_request(from_seq: int, upto_seq: int, limit: int, final: bool = False):
    from schemas import topic_events as te
    from schemas.codec import decode, encode, new_event

    payload = te.TopicBacklogRequested(from_seq=from_seq, upto_seq=upto_seq, limit=limit, final=final)
    return decode(encode(new_event(te.TOPIC_BACKLOG_REQUESTED, payload, tenant_id="t", conversation_id="c",
                                   user_id="alice", seq=from_seq - 1)))


@pytest.mark.asyncio
async def test_the_recall_stage_reads_a_range_back_in_order_and_waits_for_the_projection(settings):
    from core.embeddings import make_embedder
    from projections.topic_reads import PostgresBacklogReads
    from runtime.db import make_pool
    from schemas import topic_events as te
    from schemas.codec import decode, encode
    from streams.topics_memory.recall import BacklogStage

    await insert_messages(settings, [(1, "user", "How do I start a sourdough starter?"), (2, "assistant", "Flour."),
                                     (3, "system", "a system note"), (4, "user", "My marathon plan?"),
                                     (5, "user", "And the loaf?")])
    async with make_pool(settings, schema=settings.pg_schema) as pool:
        stage = BacklogStage(make_embedder(settings), PostgresBacklogReads(pool), inputs_wait_s=0.5)
        # Seq 6 is not projected yet: nothing is sent (the fold asks again), unless it is the last attempt.
        assert await stage.handle(backlog_request(1, 6, 100)) == []
        *recalled, done = [decode(encode(e)) for e in await stage.handle(backlog_request(1, 6, 100, final=True))]
        assert (done.type, done.payload.through_seq, done.payload.missing) == (te.TOPIC_BACKLOG_READ, 6, 1)
        await insert_messages(settings, [(6, "assistant", "Bake it hot.")])
        # A read of at most 3 rows: seqs 1-3 (the system message is read past, not sent).
        *recalled, done = [decode(encode(e)) for e in await stage.handle(backlog_request(1, 6, 3))]
        assert [(r.payload.seq, r.payload.after_seq, r.payload.role) for r in recalled] == [
            (1, 0, "user"), (2, 1, "assistant")]
        assert len(recalled[0].payload.embedding) == 384 and recalled[1].payload.embedding is None
        assert recalled[1].payload.importance == 0.9 and recalled[0].envelope.user_id == "alice"
        assert (done.payload.through_seq, done.payload.last_recalled_seq, done.payload.missing) == (3, 2, 0)
        *recalled, done = [decode(encode(e)) for e in await stage.handle(backlog_request(4, 6, 100))]
        assert [(r.payload.seq, r.payload.after_seq) for r in recalled] == [(4, 3), (5, 4), (6, 5)]
        assert all(len(r.payload.embedding) == 384 for r in recalled[:2]) and recalled[2].payload.embedding is None
        assert done.payload.through_seq == 6 and done.payload.count == 3


@pytest.mark.asyncio
async def test_messages_delivered_after_later_ones_are_placed_once(settings):
    """What a takeover did to the survivor's fold (tests/integration/test_two_workers.py), made
    on purpose: seqs 6-9 reach the log after 10-15. Each of the 16 is placed in a topic once,
    none is filed as late (docs/topics.md, "Late messages are placed, once")."""
    order = [*range(0, 6), *range(10, 16), *range(6, 10)]
    turns = chat(16)
    async with MemoryClient(settings) as client:
        for seq in order:
            role, content = turns[seq]
            await client.enqueue(client.message_event(
                tenant_id="tenant-a", conversation_id="late-order", user_id="alice", seq=seq, role=role,
                content=content))
        await client.flush()
    env = WORKER_ENV | {"MEMORY_EMBEDDING__PROVIDER": "stub"}
    async with worker_process(settings, extra_env=env, log_name="topics-late") as worker:
        async def settled() -> bool:
            if worker.returncode is not None:
                raise AssertionError(f"the worker exited (log {worker.log_path})")
            placed = await scalar(settings, "SELECT count(*) FROM topic_messages")
            unassigned = await scalar(settings, "SELECT count(*) FROM topic_unassigned")
            return placed + unassigned >= 16
        await wait_until(settled, 240, "every message placed or named")
    assert await scalar(settings, "SELECT count(*) FROM topic_unassigned") == 0
    assert await scalar(settings, "SELECT count(DISTINCT seq) FROM topic_messages") == 16
    assert await scalar(settings, "SELECT sum(message_count) FROM topics") == 16  # none counted twice

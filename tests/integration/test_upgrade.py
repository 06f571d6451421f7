"""Upgrade: a generation whose fold states are in the per-system agents' tables (window-state,
chunk-state, topic-state, as the agents before the conversation processor wrote them) moves on to
the processor without losing memory: the worker carries the states over (memory_agent/upgrade.py)
and the conversations go on where they were, with no window, chunk or topic message done twice."""

from __future__ import annotations

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from memory_agent.client import MemoryClient
from memory_agent.upgrade import LEGACY_TABLES
from runtime.kafka_topics import TopicSpec, changelog_topic, ensure_topics
from streams.processor import CONVERSATION_TABLE
from streams.slice import unpack
from tests.integration.conftest import scalar, wait_until, worker_process
from tests.support.fake_openai import FakeOpenAI

CONVERSATIONS = 3
FIRST, TOTAL = 24, 48  # seqs 0-23 under the old layout, 24-47 after the upgrade
ENV = {"MEMORY_EMBEDDING__PROVIDER": "stub", "MEMORY_WINDOW__WINDOW_SIZE": "6",
       "MEMORY_WINDOW__SUMMARIZE_AFTER_SEQ": "3",
       # a chunk of the 4 oldest messages once more than 6 are unsummarized
       "MEMORY_FACTS__SUMMARIZATION_THRESHOLD": "6", "MEMORY_FACTS__BATCH_SIZE": "4",
       # a request the stopped worker left unanswered is re-issued within the waits below
       "MEMORY_WINDOW__REQUEST_TIMEOUT_S": "30", "MEMORY_FACTS__REQUEST_TIMEOUT_S": "30",
       "MEMORY_TOPICS__EMBEDDING_TIMEOUT_S": "30"}


async def say(client: MemoryClient, seqs: range) -> None:
    salt = client.settings.kafka.topic_prefix  # keeps the shared LLM and embedding caches out
    for seq in seqs:
        for c in range(CONVERSATIONS):
            await client.append_message(
                tenant_id="tenant-a", conversation_id=f"c{c}", user_id="alice", seq=seq,
                role="user" if seq % 2 == 0 else "assistant",
                content=f"{salt} conversation {c} message {seq}: {'we plan the garden' if seq % 2 == 0 else 'ok'}")


async def counts(settings, upto: int) -> dict:
    return {
        "placed": await scalar(settings, "SELECT (SELECT count(*) FROM topic_messages)"
                                         " + (SELECT coalesce(sum(message_count), 0) FROM topic_archives)"),
        "in_flight": await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'processing'"),
        "summarized": await scalar(settings, "SELECT count(DISTINCT conversation_id) FROM memory"
                                             f" WHERE status = 'completed' AND end_sequence >= {upto - 8}"),
        "chunked": await scalar(settings, "SELECT count(DISTINCT conversation_id) FROM conversation_chunks"
                                          f" WHERE message_range_end >= {upto - 12}"),
        "topic fold at seq": await scalar(settings, "SELECT min(last_seq) FROM topic_conversations"),
    }


async def wait_settled(settings, upto: int, timeout: float, worker) -> None:
    """Until every system has done its part up to `upto`; on a timeout the counts that fell
    short and the end of the worker's log say which system stopped where."""
    want = {"placed": CONVERSATIONS * upto, "in_flight": 0, "summarized": CONVERSATIONS, "chunked": CONVERSATIONS,
            "topic fold at seq": upto - 1}
    last: dict = {}

    async def check() -> bool:
        last.update(await counts(settings, upto))
        return last == want

    try:
        await wait_until(check, timeout, f"messages up to {upto} settled")
    except AssertionError as e:
        tail = open(worker.log_path, errors="replace").read()[-6000:]
        raise AssertionError(f"{e}: counts {last}, wanted {want}; {worker.log_path} ends:\n{tail}") from None


async def read_to_end(settings, topic: str) -> list:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(settings.kafka.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        out = []
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                out += records
        return out
    finally:
        await consumer.stop()


async def as_the_old_agents_left_it(settings) -> int:
    """The processor's changelog split into the three old tables' changelogs (same keys, same
    partitions, each system's bytes as its old agent wrote them), and the processor's deleted:
    the deployment now looks as if the old agents had run it. Returns the records written."""
    current = changelog_topic(settings, CONVERSATION_TABLE)
    legacy = {name: changelog_topic(settings, table) for name, table in LEGACY_TABLES.items()}
    await ensure_topics(settings, [TopicSpec(t, settings.kafka.partitions, {"cleanup.policy": "compact"})
                                   for t in legacy.values()])
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    await producer.start()
    written = 0
    try:
        for record in await read_to_end(settings, current):
            for name, state in unpack(record.value).items():
                await producer.send_and_wait(legacy[name], state, key=record.key, partition=record.partition)
                written += 1
    finally:
        await producer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_topics([current])
        # Deleted asynchronously by the controller, slowly while the suite's other tests delete
        # theirs: the new worker carries the states over only where this changelog is gone.
        await wait_until(lambda: gone(admin, current), 120, f"{current} deleted")
    finally:
        await admin.close()
    return written


async def carried(worker) -> bool:
    log = open(worker.log_path, errors="replace").read()
    if worker.returncode is not None:
        raise AssertionError(f"the worker exited ({worker.returncode}):\n{log[-6000:]}")
    return f"carried the states of {CONVERSATIONS} conversations over" in log


async def gone(admin: AIOKafkaAdminClient, topic: str) -> bool:
    return topic not in await admin.list_topics()


async def rows(settings, sql: str) -> list:
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        return await (await conn.execute(sql)).fetchall()


@pytest.mark.asyncio
async def test_a_deployment_of_the_per_system_agents_moves_to_the_processor_without_losing_memory(settings):
    with FakeOpenAI() as fake:
        env = fake.env(llm=True) | ENV
        async with worker_process(settings, log_name="before-upgrade", extra_env=env) as worker, \
                MemoryClient(settings) as client:
            await say(client, range(FIRST))
            await wait_settled(settings, FIRST, 240, worker)
        assert await as_the_old_agents_left_it(settings) >= 3 * CONVERSATIONS  # every system, every conversation
        async with worker_process(settings, log_name="after-upgrade", extra_env=env) as worker, \
                MemoryClient(settings) as client:
            await wait_until(lambda: carried(worker), 120, f"the states carried over ({worker.log_path})")
            await say(client, range(FIRST, TOTAL))
            await wait_settled(settings, TOTAL, 360, worker)

    # Every message placed in a topic once (a topic fold started afresh would place 0-23 again:
    # they are not in its fresh state, and the topics projector counts what the fold says).
    assert await scalar(settings, "SELECT sum(message_count) FROM topics") == CONVERSATIONS * TOTAL
    # No window summarized twice: one completed row per window, chained without overlap.
    windows = await rows(settings, "SELECT conversation_id, start_sequence, end_sequence, count(*),"
                                   " count(*) FILTER (WHERE status = 'completed') FROM memory"
                                   " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")
    assert windows and all(count == 1 and completed == 1 for *_, count, completed in windows), windows
    # Chunks of a conversation follow each other without overlap (no range extracted twice).
    chunks = await rows(settings, "SELECT conversation_id, message_range_start, message_range_end"
                                  " FROM conversation_chunks ORDER BY 1, 2")
    for (c1, _, end), (c2, start, _) in zip(chunks, chunks[1:]):
        assert c1 != c2 or start >= end, chunks

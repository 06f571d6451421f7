"""Two `memory-agent worker` processes of one generation share the partitions; one is SIGKILLed
mid-stream and the other takes over: nothing lost, nothing duplicated, no window summarized twice.

Every system runs (window, facts, topics, the message index), with the stub embedder and the fake
OpenAI server as the LLM so the test exercises the plumbing and the rebalances, not the models.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import psycopg
import pytest

from runtime.client import MemoryClient
from tests.integration.conftest import scalar as _scalar
from tests.integration.conftest import wait_until, worker_process
from tests.support.fake_openai import FakeOpenAI

CONVERSATIONS = 12
PER_CONVERSATION = 40  # seqs 0-39
TOTAL = CONVERSATIONS * PER_CONVERSATION
# Around a rebalance one of a conversation's messages can never reach the topic fold (it places the
# next ones over it; docs/topics.md, "Passed-over seqs"): the fold reads such seqs back from the
# projected log after `embedding_timeout_s` (30 s here), so topic placement is checked too.
SETTLED = {
    "messages": "SELECT count(*) FROM messages",
    "indexed": "SELECT count(*) FROM message_embeddings",
    "placed in topics": "SELECT (SELECT count(*) FROM topic_messages)"
                        " + (SELECT coalesce(sum(message_count), 0) FROM topic_archives)",
    "topic fold at seq": "SELECT min(last_seq) FROM topic_conversations",
    "summaries in flight": "SELECT count(*) FROM memory WHERE status = 'processing'",
    "conversations summarized near their end": "SELECT count(DISTINCT conversation_id) FROM memory"
    f" WHERE status = 'completed' AND end_sequence >= {PER_CONVERSATION - 8}",
}
EXPECTED = {"messages": TOTAL, "indexed": TOTAL, "placed in topics": TOTAL,
            "topic fold at seq": PER_CONVERSATION - 1, "summaries in flight": 0,
            "conversations summarized near their end": CONVERSATIONS}
ASSIGNED = "Setting newly assigned partitions"  # faust (aiokafka) logs it at every rebalance


def text(conversation: int, seq: int, salt: str) -> str:
    """`salt` (the test's topic prefix) keeps the shared LLM and embedding caches from answering."""
    return f"{salt} conversation {conversation} message {seq}: {'we plan the garden beds' if seq % 2 == 0 else 'noted'}"


async def say(client: MemoryClient, seqs: range) -> None:
    salt = client.settings.kafka.topic_prefix
    for seq in seqs:
        for c in range(CONVERSATIONS):
            await client.append_message(tenant_id="tenant-a", conversation_id=f"c{c}", user_id="alice", seq=seq,
                                        role="user" if seq % 2 == 0 else "assistant", content=text(c, seq, salt))


def worked(process) -> bool:
    """The worker owns partitions of a stage: it has summarized a window or chunked messages."""
    log = Path(process.log_path).read_text(errors="replace")
    return "Summarized messages" in log or "Chunked messages" in log


def joined(process, settings) -> bool:
    """The worker is a member of the faust group (it shares the ordered agents' partitions)."""
    group = f"{settings.kafka.topic_prefix}.{settings.generation}.streams'"
    return f"Joined group '{group}" in Path(process.log_path).read_text(errors="replace")


def assignments(process) -> int:
    return Path(process.log_path).read_text(errors="replace").count(ASSIGNED)


async def patiently(query, attempts: int = 60):
    """The query's result, waiting out a PostgreSQL with no connection free (the server is
    shared by every test run on the machine, and each worker holds a few dozen)."""
    for attempt in range(1, attempts + 1):
        try:
            return await query()
        except psycopg.OperationalError:
            if attempt == attempts:
                raise
            await asyncio.sleep(1)


async def scalar(settings, sql: str):
    return await patiently(lambda: _scalar(settings, sql))


async def rows(settings, sql: str) -> list:
    async def query():
        async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
        ) as conn:
            return await (await conn.execute(sql)).fetchall()
    return await patiently(query)


# Found by this test (windows), fixed in streams/kafka_transport.py (a takeover skipped the first records of
# partitions the dead worker had not committed yet, so summary results and topic placements were
# lost) and streams/window/summarize.py (the fold's re-issue of a lost result went unanswered).
@pytest.mark.asyncio
async def test_second_worker_takes_over_after_sigkill_nothing_lost_or_doubled(settings):
    with FakeOpenAI() as fake:
        # A request not answered in 30 s is re-issued: a lost result heals within the wait below.
        env = fake.env(llm=True) | {"MEMORY_EMBEDDING__PROVIDER": "stub", "MEMORY_WINDOW__WINDOW_SIZE": "6",
                                    "MEMORY_WINDOW__SUMMARIZE_AFTER_SEQ": "3", "MEMORY_WINDOW__REQUEST_TIMEOUT_S": "30",
                                    "MEMORY_TOPICS__EMBEDDING_TIMEOUT_S": "30"}
        async with worker_process(settings, log_name="two-a", extra_env=env | {
                    "MEMORY_STATE_DIR": f"/tmp/memory-agent-test/{settings.generation}-a"}) as a, \
                worker_process(settings, log_name="two-b", extra_env=env | {
                    "MEMORY_STATE_DIR": f"/tmp/memory-agent-test/{settings.generation}-b"}) as b, \
                MemoryClient(settings) as client:
            await say(client, range(0, PER_CONVERSATION // 2))
            first_half = CONVERSATIONS * PER_CONVERSATION // 2

            async def both_working() -> bool:
                return (joined(a, settings) and joined(b, settings) and (worked(a) or worked(b))
                        and await scalar(settings, "SELECT count(*) FROM messages") == first_half
                        and await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'completed'") > 0)

            await wait_until(both_working, 240, f"both workers assigned and working (logs {a.log_path}, {b.log_path})")
            # The victim is a worker that owns stage work (it has called the LLM); the other survives.
            victim, survivor = (a, b) if worked(a) else (b, a)
            # Mid-stream: the second half starts arriving, then the victim dies without a goodbye.
            sender = asyncio.create_task(say(client, range(PER_CONVERSATION // 2, PER_CONVERSATION)))
            await wait_until(lambda: _more_than(settings, first_half + 24), 120, "the second half arriving")
            assigned_before = assignments(survivor)
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            await sender

            state: dict = {}

            async def settled() -> bool:
                for name, sql in SETTLED.items():
                    state[name] = await scalar(settings, sql)
                return state == EXPECTED

            try:
                await wait_until(settled, 300, "worker B to finish everything")
            except AssertionError:
                raise AssertionError(f"{state} != {EXPECTED} (log {survivor.log_path})\n"
                                     + "\n".join(await _diagnosis(settings))) from None
            assert survivor.returncode is None, "the surviving worker must still run"
            assert assignments(survivor) > assigned_before, "the survivor was reassigned the victim's partitions"

    # Nothing lost: every (conversation, seq) projected and indexed once (and placed in a topic).
    assert await scalar(settings, "SELECT count(DISTINCT (conversation_id, seq)) FROM messages") == TOTAL
    # Topic folds counted no message twice (a refolded message would count twice).
    placed = await scalar(settings, "SELECT sum(message_count) FROM topics")
    assert placed == TOTAL
    # No window summarized twice: one row per window, each completed, chained without overlap.
    windows = await rows(settings, "SELECT conversation_id, start_sequence, end_sequence, count(*),"
                                   " count(*) FILTER (WHERE status = 'completed') FROM memory"
                                   " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")
    assert windows and all(count == 1 and completed == 1 for *_, count, completed in windows), windows
    # Chunks of a conversation follow each other without overlap (no range extracted twice).
    chunks = await rows(settings, "SELECT conversation_id, message_range_start, message_range_end"
                                  " FROM conversation_chunks ORDER BY 1, 2")
    for (c1, _, end), (c2, start, _) in zip(chunks, chunks[1:]):
        assert c1 != c2 or start >= end, chunks


async def _diagnosis(settings) -> list[str]:
    """What a failure needs to be understood: the folds' last states (their changelogs) for the
    conversations that are short of something, their memory rows, the messages without a topic."""
    short_of_topics = await rows(settings, "SELECT m.conversation_id, m.seq FROM messages m LEFT JOIN topic_messages t"
                                           " USING (tenant_id, conversation_id, seq) WHERE t.seq IS NULL ORDER BY 1, 2")
    out = [f"messages without a topic: {short_of_topics}"]
    for table in ("window-state", "topic-state"):
        states = await _changelog(settings, table)
        out += [f"{table} {key.decode(errors='replace')} @{where}: {value[:600]!r}"
                for key, history in sorted(states.items()) for where, value in history[-1:]]
    topic_states = await _changelog(settings, "topic-state")
    out.append(f"seqs the topic folds passed over: {_passed_over(topic_states)}")
    windows = await _changelog(settings, "window-state")
    stuck = [key for key, history in windows.items() if b'"in_flight":{' in history[-1][1]]
    for key in stuck:
        out += [f"window-state history {key.decode()} @{where}: {value[:300]!r}" for where, value in windows[key]]
    unplaced = sorted({f"tenant-a/{conversation}".encode() for conversation, _ in short_of_topics})[:2]
    out += [f"memory-events {record}" for record in await _memory_events(settings, stuck + unplaced)]
    memory = await rows(settings, "SELECT conversation_id, memory_id, start_sequence, end_sequence, status, attempt"
                                  " FROM memory ORDER BY 1, 2")
    return out + [f"memory {row}" for row in memory]


def _passed_over(states: dict) -> dict:
    """Per conversation, the seq ranges its topic fold placed later messages over (`skipped`)."""
    import orjson

    out = {}
    for key, history in states.items():
        try:
            skipped = (orjson.loads(history[-1][1]).get("topics") or {}).get("skipped")
        except orjson.JSONDecodeError:
            continue  # sealed
        if skipped:
            out[key.decode(errors="replace")] = skipped
    return out


async def _changelog(settings, table: str) -> dict[bytes, tuple[str, bytes]]:
    """Every record of every key of one slice's state in the conversation processor's table changelog
    (`table`: the slice's old table name, window-state or topic-state)."""
    from aiokafka import AIOKafkaConsumer

    from streams.slice import unpack

    part = {"window-state": "window", "topic-state": "topics"}[table]
    topic = f"{settings.kafka.topic_prefix}.{settings.generation}.streams-conversation-state-changelog"
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka.bootstrap_servers,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    states: dict = {}
    try:
        while batch := await consumer.getmany(timeout_ms=2000):
            for tp, records in batch.items():
                for record in records:
                    value = unpack(record.value).get(part)
                    if value is not None:
                        states.setdefault(record.key, []).append((f"{tp.partition}:{record.offset}", value))
    finally:
        await consumer.stop()
    return states


async def _memory_events(settings, keys: list[bytes]) -> list[str]:
    """The memory topic's records of these conversations, with the streams group's committed offsets."""
    import orjson
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

    topic = settings.kafka.memory_topic(settings.generation)
    group = f"{settings.kafka.topic_prefix}.{settings.generation}.streams"
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    out = [f"committed by the streams group: {sorted((tp.topic[-20:], tp.partition, o.offset) for tp, o in committed.items())}"]
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka.bootstrap_servers,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        while batch := await consumer.getmany(timeout_ms=2000):
            for tp, records in batch.items():
                for record in records:
                    if record.key in keys:
                        event = orjson.loads(record.value)
                        payload = event.get("payload") or {}
                        out.append(f"{record.key.decode()} {tp.partition}:{record.offset} {event.get('type')}"
                                   f" seq={event.get('seq')} memory={payload.get('memory_id')}"
                                   f" attempt={payload.get('attempt')} {payload.get('start_seq')}-{payload.get('end_seq')}")
    finally:
        await consumer.stop()
    return out


async def _more_than(settings, count: int) -> bool:
    return await scalar(settings, "SELECT count(*) FROM messages") > count

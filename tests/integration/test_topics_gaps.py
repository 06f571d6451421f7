"""Issue 14: seqs the topic fold never got (it placed later ones over them) are read back from
the projected log and placed; a seq the log does not have either is given up once, not asked
for forever. Real Kafka, PostgreSQL and `memory-agent worker`.

The fold is made to miss seqs by putting them in the projected messages table only (as if the
fold's copy had been lost around a rebalance, tests/integration/test_two_workers.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import orjson
import psycopg
import pytest

from runtime.client import MemoryClient
from schemas import topic_events as te
from tests.integration.conftest import scalar, wait_until, worker_process
from tests.integration.test_topics_backlog import events_of

TIMEOUT_S = 2  # embedding_timeout_s: also how long a passed-over seq waits before it is read back
WORKER_ENV = {"MEMORY_SYSTEMS": '["topics"]', "MEMORY_EMBEDDING__PROVIDER": "stub",
              "MEMORY_TOPICS__EMBEDDING_TIMEOUT_S": str(TIMEOUT_S)}
FOUND, LOST, REPLY = "gap-found", "gap-lost", "gap-reply"


def role(seq: int) -> str:
    return "user" if seq % 2 == 0 else "assistant"


def text(seq: int) -> str:
    return f"message {seq}: we plan the garden beds and the tomatoes" if seq % 2 == 0 else f"noted ({seq})"


async def say(client: MemoryClient, conversation_id: str, seqs) -> None:
    for seq in seqs:
        await client.append_message(tenant_id="tenant-a", conversation_id=conversation_id, user_id="alice", seq=seq,
                                    role=role(seq), content=text(seq))


async def project_only(settings, conversation_id: str, seqs) -> None:
    """Rows in the messages projection that the topic fold never sees on the log."""
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        for seq in seqs:
            await conn.execute(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, metadata,"
                " occurred_at, source_partition, source_offset) VALUES (%s, %s, %s, %s, 'alice', %s, %s, '{}',"
                " %s, 0, 0)",
                ("tenant-a", conversation_id, seq, f"projected-only-{conversation_id}-{seq}", role(seq), text(seq),
                 datetime.now(UTC)))


async def placed_seqs(settings, conversation_id: str) -> int:
    active = await scalar(settings, "SELECT count(*) FROM topic_messages WHERE conversation_id = %s",
                          (conversation_id,))
    archived = await scalar(settings, "SELECT coalesce(sum(message_count), 0) FROM topic_archives"
                                      " WHERE conversation_id = %s", (conversation_id,))
    return int(active) + int(archived)


async def gap_events(settings, conversation_id: str) -> list[tuple[str, dict]]:
    key = f"tenant-a/{conversation_id}".encode()
    out = []
    for record_key, value in await events_of(settings, settings.kafka.memory_topic(settings.generation)):
        if record_key != key:
            continue
        event = orjson.loads(value)
        payload = event.get("payload") or {}
        if event.get("type") == te.TOPIC_BACKLOG_REQUESTED and payload.get("ranges"):
            out.append(("asked", payload))
        elif event.get("type") == te.TOPIC_BACKLOG_READ and payload.get("gap"):
            out.append(("read", payload))
    return out


@pytest.mark.asyncio
async def test_seqs_the_fold_never_got_are_read_back_from_the_log_and_a_truly_missing_one_is_given_up(settings):
    async with worker_process(settings, extra_env=WORKER_ENV, log_name="topics-gaps") as worker, \
            MemoryClient(settings) as client:
        await say(client, FOUND, range(0, 10))
        await wait_until(lambda: _projected(settings, FOUND, 10), 120, f"seqs 0-9 projected (log {worker.log_path})")
        await project_only(settings, FOUND, range(10, 15))  # 10-14: in the projection, never on the fold's path
        await say(client, FOUND, range(15, 21))
        await say(client, LOST, [s for s in range(0, 12) if s != 5])  # seq 5 exists nowhere
        # Issue 22: user seq 0 misses the fold, its reply 1 finds no topic ("unassigned"), and
        # joins seq 0's topic once the gap read has placed it.
        await project_only(settings, REPLY, [0])
        await say(client, REPLY, range(1, 4))

        async def all_placed() -> bool:
            if worker.returncode is not None:
                raise AssertionError(f"the worker exited (log {worker.log_path})")
            return (await placed_seqs(settings, FOUND) == 21 and await placed_seqs(settings, LOST) == 11
                    and await placed_seqs(settings, REPLY) == 4)

        try:
            await wait_until(all_placed, 180, f"every message placed (log {worker.log_path})")
        except AssertionError:
            raise AssertionError(f"placed {await placed_seqs(settings, FOUND)}/21 and "
                                 f"{await placed_seqs(settings, LOST)}/11 (log {worker.log_path})") from None

        # The missing seq: read once, given up (missing=1), and not asked for again.
        await wait_until(lambda: _read_with_missing(settings), 60, "the gap read of the lost seq answered")
        await asyncio.sleep(4 * TIMEOUT_S)  # several timeouts and ticks later...
        lost = await gap_events(settings, LOST)
        asked = [p for kind, p in lost if kind == "asked"]
        assert [p["ranges"] for p in asked] == [[[5, 5]]], lost  # ...still asked once
        assert [(p["through_seq"], p["missing"]) for kind, p in lost if kind == "read"] == [(5, 1)], lost
        found = await gap_events(settings, FOUND)
        assert [p["ranges"] for kind, p in found if kind == "asked"] == [[[10, 14]]], found
        assert [(p["count"], p["missing"]) for kind, p in found if kind == "read"] == [(5, 0)], found
        assert await scalar(settings, "SELECT count(*) FROM topic_unassigned") == 0
        assert await scalar(settings, "SELECT sum(message_count) FROM topics") == 21 + 11 + 4  # each placed once
        assert await scalar(settings, "SELECT count(DISTINCT topic_id) FROM topic_messages"
                                      " WHERE conversation_id = %s AND seq IN (0, 1)", (REPLY,)) == 1


async def _projected(settings, conversation_id: str, count: int) -> bool:
    return await scalar(settings, "SELECT count(*) FROM messages WHERE conversation_id = %s",
                        (conversation_id,)) == count


async def _read_with_missing(settings) -> bool:
    return any(kind == "read" for kind, _ in await gap_events(settings, LOST))

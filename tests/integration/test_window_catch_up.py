"""Issue 16, item 4: a long dated conversation ingested in one burst gets a summary chain that
reaches its end, and a lagging summary never makes the turn-start context unbounded."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from runtime.client import MemoryClient
from tests.integration.conftest import running_api, running_projectors, wait_until, worker_process

MESSAGES = 400
START = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)


def dated_history(conversation: str, count: int, size: int = 0) -> list[dict]:
    """Two people over many dated sessions (ten messages per session, a week apart)."""
    out = []
    for seq in range(count):
        session, position = divmod(seq, 10)
        speaker, role = ("Maria", "user") if seq % 2 == 0 else ("Tom", "assistant")
        text = (f"{speaker}: in session {session} we talked about the garden in Porto, item {seq},"
                f" and the trip planned for week {session + 3}.")
        out.append(dict(
            tenant_id="tenant-a", conversation_id=conversation, user_id="maria", seq=seq, role=role,
            content=text + " " + "details " * (size // 8),
            occurred_at=START + timedelta(days=7 * session, minutes=position),
        ))
    return out


async def burst(settings, history: list[dict]) -> None:
    """Every message queued at once, then all acknowledgements awaited."""
    async with MemoryClient(settings) as client:
        pending = [await client.enqueue(client.message_event(**fields)) for fields in history]
        await asyncio.gather(*pending)


async def memory_rows(settings, conversation: str) -> list[tuple]:
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn) as conn:
        cur = await conn.execute(
            f"SELECT memory_id, start_sequence, end_sequence, base_memory_id, status FROM {settings.pg_schema}.memory"
            " WHERE conversation_id = %s ORDER BY memory_id", (conversation,),
        )
        return [tuple(row) for row in await cur.fetchall()]


@pytest.mark.asyncio
async def test_a_burst_ingested_history_ends_with_a_summary_chain_at_its_end(settings):
    conversations = ["long-a", "long-b"]
    env = {"MEMORY_SYSTEMS": '["window"]'}  # the offline (extractive) summarizer, as shipped
    async with worker_process(settings, extra_env=env) as worker:
        for name in conversations:
            await burst(settings, dated_history(name, MESSAGES))

        async def caught_up() -> bool:
            for name in conversations:
                rows = await memory_rows(settings, name)
                completed = [r for r in rows if r[4] == "completed"]
                if not completed or any(r[4] == "processing" for r in rows):
                    return False
                if MESSAGES - 1 - max(r[2] for r in completed) >= settings.window.window_size:
                    return False
            return True

        await wait_until(caught_up, 240, f"summary chains reaching the end (log {worker.log_path})")
        for name in conversations:
            rows = await memory_rows(settings, name)
            assert all(r[4] == "completed" for r in rows), rows
            # A chain: each summary is based on the one before it, and the windows move forward.
            for before, after in zip(rows, rows[1:]):
                assert after[3] == before[0] and after[2] > before[2], rows
            assert all(r[2] - r[1] + 1 <= settings.window.window_size for r in rows)
            # The backlog rule (issue 26): while a summary is in flight the round ends are chained
            # every replay_stride seqs, as a replay of this log asks; one that finds nothing in
            # flight follows the seed. So every link is one round to one stride past the last.
            stride = settings.window.replay_stride
            assert all(2 <= after[2] - before[2] <= stride for before, after in zip(rows, rows[1:])), rows
            assert MESSAGES // stride - 2 <= len(rows) <= MESSAGES // 2, f"{len(rows)} summaries"
            print(f"{name}: {len(rows)} summaries, the last {rows[-1][1]}-{rows[-1][2]}")

        async with running_api(settings) as base, httpx.AsyncClient(
            base_url=base, headers={"X-API-Key": "key-a"}, timeout=30
        ) as http:
            response = await http.get(f"/v1/conversations/{conversations[0]}/context",
                                      params={"before_seq": MESSAGES, "query": "garden in Porto"})
            assert response.status_code == 200, response.text
            context = response.json()
            assert context["mode"] == "caught_up"
            end = context["summary"]["end_seq"]
            assert [m["seq"] for m in context["messages"]] == list(range(end + 1, MESSAGES))
            assert context["watermark"]["gap_omitted_count"] == 0
            assert len(response.content) < 64 * 1024


@pytest.mark.asyncio
async def test_a_lagging_summary_gives_a_bounded_context_that_names_what_it_left_out(settings):
    # Only the projectors run: no summary is ever made, so the whole history is the gap.
    history = dated_history("no-summary", MESSAGES, size=600)
    async with running_projectors(settings):
        await burst(settings, history)
        async with running_api(settings) as base, httpx.AsyncClient(
            base_url=base, headers={"X-API-Key": "key-a"}, timeout=30
        ) as http:
            async def fetch(**params) -> httpx.Response:
                response = await http.get("/v1/conversations/no-summary/context",
                                          params={"min_seq": MESSAGES - 1, "wait_ms": 5000, **params})
                assert response.status_code == 200, response.text
                return response

            async def projected() -> bool:
                return (await fetch()).json()["watermark"]["last_seq"] == MESSAGES - 1

            await wait_until(projected, 120, "all messages projected")

            limits = settings.window
            response = await fetch(before_seq=MESSAGES)
            context, watermark = response.json(), response.json()["watermark"]
            assert context["mode"] == "raw"
            seqs = [m["seq"] for m in context["messages"]]
            # ~700-byte messages: the byte limit binds before the message count does.
            assert 0 < len(seqs) <= limits.context_max_gap_messages
            assert seqs == list(range(MESSAGES - len(seqs), MESSAGES))  # the newest ones, in order
            assert sum(len(m["content"].encode()) for m in context["messages"]) <= limits.context_max_gap_bytes
            assert watermark["verbatim_from_seq"] == seqs[0]
            assert (watermark["gap_omitted_from_seq"], watermark["gap_omitted_to_seq"]) == (0, seqs[0] - 1)
            assert watermark["gap_omitted_count"] == seqs[0]
            assert watermark["complete"] is True and watermark["missing_seqs"] == []
            assert len(response.content) < 64 * 1024
            # A turn earlier in the conversation: the window moves with before_seq.
            earlier = (await fetch(before_seq=100)).json()
            earlier_seqs = [m["seq"] for m in earlier["messages"]]
            assert earlier_seqs[-1] == 99 and earlier["watermark"]["gap_omitted_to_seq"] == earlier_seqs[0] - 1
            # Short messages: the message count binds.
            short = dated_history("short", 300)
            await burst(settings, short)

            async def short_projected() -> bool:
                r = await http.get("/v1/conversations/short/context", params={"min_seq": 299, "wait_ms": 5000})
                return r.status_code == 200 and r.json()["watermark"]["last_seq"] == 299

            await wait_until(short_projected, 120, "short conversation projected")
            response = await http.get("/v1/conversations/short/context", params={"before_seq": 300})
            watermark = response.json()["watermark"]
            assert [m["seq"] for m in response.json()["messages"]] == list(
                range(300 - limits.context_max_gap_messages, 300))
            assert watermark["gap_omitted_count"] == 300 - limits.context_max_gap_messages

"""Seed 002's Round 1-10 through real Kafka, the faust worker, a slow LLM server and the HTTP API."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest

from runtime.client import MemoryClient
from tests.integration.conftest import running_api, scalar, wait_until, worker_process
from tests.support.fake_openai import FakeOpenAI

CONVERSATION = "design-chat"


def rows_query(settings) -> str:
    return (
        f"SELECT memory_id, start_sequence, end_sequence, base_memory_id, status FROM {settings.pg_schema}.memory"
        " WHERE conversation_id = 'design-chat' ORDER BY memory_id"
    )


async def memory_rows(settings) -> list[tuple]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn) as conn:
        return [tuple(r) for r in await (await conn.execute(rows_query(settings))).fetchall()]


async def expect_rows(settings, expected: list[tuple], what: str, timeout: float = 60) -> None:
    async def matches() -> bool:
        return await memory_rows(settings) == expected

    try:
        await wait_until(matches, timeout, what)
    except AssertionError:
        raise AssertionError(f"{what}: memory table is {await memory_rows(settings)}, expected {expected}") from None


class Conversation:
    """Appends round messages and reads the turn-start context like a chat service would."""

    def __init__(self, client: MemoryClient, http: httpx.AsyncClient) -> None:
        self.client, self.http = client, http

    async def say(self, seq: int) -> None:
        role = "user" if seq % 2 == 0 else "assistant"
        verb = "asks" if role == "user" else "answers"
        await self.client.append_message(
            tenant_id="tenant-a", conversation_id=CONVERSATION, user_id="alice", seq=seq, role=role,
            content=f"Round {seq // 2 + 1}: the {role} {verb} about decision number {seq}.",
        )

    async def context_before(self, seq: int) -> dict:
        """Context for the turn whose current message is `seq`, once `seq` is projected."""
        for _ in range(60):  # the first call may come before the worker has started
            response = await self.http.get(
                f"/v1/conversations/{CONVERSATION}/context",
                params={"before_seq": seq, "min_seq": seq, "wait_ms": 2000},
            )
            if response.status_code == 200 and response.json()["watermark"]["last_seq"] >= seq:
                return response.json()
            assert response.status_code in (200, 404), response.text
        raise AssertionError(f"seq {seq} was never projected: {response.text}")


def summary_and_gap(context: dict) -> tuple[str, int | None, list[int]]:
    summary = context["summary"]["memory_id"] if context["summary"] else None
    return context["mode"], summary, [m["seq"] for m in context["messages"]]


@contextlib.asynccontextmanager
async def chat_session(settings, fake: FakeOpenAI, **worker_env):
    # Only the window system's agents: other systems' LLM calls would take the test's permits.
    # The LLM result cache is shared by every deployment on this PostgreSQL: off here, so each
    # summary really reaches the (held) server.
    env = fake.env() | {"MEMORY_SYSTEMS": '["window"]', "MEMORY_LLM__CACHE_ENABLED": "false"} | worker_env
    async with worker_process(settings, extra_env=env) as worker, running_api(settings) as base:
        async with MemoryClient(settings) as client, httpx.AsyncClient(
            base_url=base, headers={"X-API-Key": "key-a"}, timeout=10
        ) as http:
            yield worker, Conversation(client, http)


P, C = "processing", "completed"
R1, R2, R3, R4, R5 = (1, 0, 5, None), (2, 0, 7, 1), (3, 0, 11, 2), (4, 2, 15, 3), (5, 6, 19, 4)
# Per round: the context at round start (mode, memory id used, gap seqs), the memory table
# after the round ends, and the table once the summary in flight completes before the next
# round (seed 002's catch-up assumptions) or None when the next round starts first.
SEED_002 = [
    (1, ("raw", None, []), [], None),
    (2, ("raw", None, [0, 1]), [], None),
    (3, ("raw", None, [0, 1, 2, 3]), [(*R1, P)], [(*R1, C)]),
    (4, ("caught_up", 1, []), [(*R1, C), (*R2, P)], None),
    (5, ("fallback", 1, [6, 7]), [(*R1, C), (*R2, P)], [(*R1, C), (*R2, C)]),
    (6, ("caught_up", 2, [8, 9]), [(*R1, C), (*R2, C), (*R3, P)], None),
    (7, ("fallback", 2, [8, 9, 10, 11]), [(*R1, C), (*R2, C), (*R3, P)], [(*R1, C), (*R2, C), (*R3, C)]),
    (8, ("caught_up", 3, [12, 13]), [(*R1, C), (*R2, C), (*R3, C), (*R4, P)], None),
    (9, ("fallback", 3, [12, 13, 14, 15]), [(*R1, C), (*R2, C), (*R3, C), (*R4, P)],
     [(*R1, C), (*R2, C), (*R3, C), (*R4, C)]),
    (10, ("caught_up", 4, [16, 17]), [(*R1, C), (*R2, C), (*R3, C), (*R4, C), (*R5, P)],
     [(*R1, C), (*R2, C), (*R3, C), (*R4, C), (*R5, C)]),
]


@pytest.mark.asyncio
async def test_ten_rounds_reproduce_seed_002(settings):
    with FakeOpenAI(latency_s=0.3) as fake:
        fake.hold_chat()  # the test decides when each summary comes back, as the seed assumes
        async with chat_session(settings, fake) as (worker, chat):
            previous_table: list[tuple] = []
            for round_no, expected_context, after_round, after_completion in SEED_002:
                user_seq, assistant_seq = 2 * round_no - 2, 2 * round_no - 1
                await chat.say(user_seq)
                context = await chat.context_before(user_seq)
                assert summary_and_gap(context) == expected_context, f"round {round_no} start (log {worker.log_path})"
                await chat.say(assistant_seq)
                if after_round == previous_table:
                    await asyncio.sleep(1.0)  # time for a wrong trigger to show up
                await expect_rows(settings, after_round, f"round {round_no} end")
                previous_table = after_round
                if after_completion is not None:
                    fake.release(1)
                    await expect_rows(settings, after_completion, f"summary completes after round {round_no}")
                    previous_table = after_completion
    # Incremental: id=4 (2-15) was built from id=3's text plus only messages 12-15.
    request_4 = next(r for r in fake.chat_requests if "seq 2 to seq 15" in r.user_content)
    new_part = request_4.user_content.split("New messages:")[1]
    assert "[12]" in new_part and "[15]" in new_part and "[11]" not in new_part
    assert "drop anything from before seq 2" in request_4.user_content
    summary_3 = await scalar(settings, "SELECT memory_text FROM memory WHERE memory_id = 3")
    assert summary_3 and summary_3 in request_4.user_content
    assert await scalar(settings, "SELECT count(*) FROM memory WHERE model = 'fake-llm'") == 5
    assert await scalar(settings, "SELECT min(generation_time_ms) FROM memory") >= 300
    assert await scalar(settings, "SELECT total_summaries FROM memory_generation_stats") == 5


@pytest.mark.asyncio
async def test_worker_killed_mid_summary_recovers_without_double_summaries(settings):
    with FakeOpenAI(latency_s=0.2) as fake:
        fake.hold_chat()
        async with chat_session(settings, fake, MEMORY_WINDOW__REQUEST_TIMEOUT_S="4") as (worker, chat):
            for seq in range(6):
                await chat.say(seq)
            await expect_rows(settings, [(1, 0, 5, None, "processing")], "first request")
            await wait_until(_has_chat_request(fake), 90, f"the LLM call to be in flight (log {worker.log_path})")
            worker.kill()  # SIGKILL while the LLM call is in flight
            await worker.wait()
        fake.release(100)  # the dead worker's call is answered into a closed socket
        async with chat_session(settings, fake, MEMORY_WINDOW__REQUEST_TIMEOUT_S="4") as (worker, chat):
            await expect_rows(settings, [(1, 0, 5, None, "completed")], "recovered summary", timeout=90)
            expected = [(1, 0, 5, None, "completed")]
            for round_no, window, base in ((4, (0, 7), 1), (5, (0, 9), 2), (6, (0, 11), 3), (7, (0, 13), 4),
                                           (8, (2, 15), 5)):
                await chat.say(2 * round_no - 2)
                await chat.say(2 * round_no - 1)
                expected = expected + [(base + 1, *window, base, "completed")]
                await expect_rows(settings, expected, f"round {round_no} summarized after the restart")
    completed_windows = await scalar(
        settings,
        "SELECT count(*) - count(DISTINCT (start_sequence, end_sequence)) FROM memory WHERE status = 'completed'",
    )
    assert completed_windows == 0


def _has_chat_request(fake: FakeOpenAI):
    async def check() -> bool:
        return len(fake.chat_requests) >= 1

    return check

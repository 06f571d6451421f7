"""The summary stage answers a request for a window the memory table already settled with the
stored result, without an LLM call: a fold that re-issues a request because it never saw the
result (a new owner of the partition after a crash) gets it, instead of silence until it gives up."""

from __future__ import annotations

import pytest

from runtime.db import make_pool
from schemas.codec import decode, encode, new_event
from schemas.events import SummaryRequested
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_FAILED, SUMMARY_REQUESTED
from projections.window_reads import PostgresWindowReads
from streams.window.summarize import SummaryStage

COMMON = dict(tenant_id="tenant-a", user_id="u1", seq=5)
WINDOW = dict(memory_id=1, start_seq=0, end_seq=5, prompt_version="summary-v1", model="m")


class NoLlm:
    """The summarizer must not be asked: the answer is in the memory table."""

    model = "m"
    prompt_version = "summary-v1"
    calls = 0

    async def summarize_window(self, **_):
        self.calls += 1
        raise AssertionError("a settled window went to the LLM again")


async def store(settings, rows: list[dict]) -> None:
    """Memory rows as the projector leaves them (projections/memory.py)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        for row in rows:
            await conn.execute(
                "INSERT INTO memory (tenant_id, conversation_id, memory_id, start_sequence, end_sequence, status,"
                " attempt, memory_text, generation_time_ms, source_event_ids, error, prompt_version, model,"
                " request_event_id) VALUES ('tenant-a', %(conversation)s, 1, 0, 5, %(status)s, %(attempt)s,"
                " %(text)s, %(ms)s, %(sources)s, %(error)s, 'summary-v1', 'm', 'request')", row)


@pytest.mark.asyncio
async def test_a_reissued_request_for_a_settled_window_gets_the_stored_result(settings):
    done = dict(COMMON, conversation_id="done")
    failed = dict(COMMON, conversation_id="failed")
    await store(settings, [
        dict(conversation="done", status="completed", attempt=1, text="the summary", ms=7, sources=["e0", "e1"],
             error=None),
        dict(conversation="failed", status="failed", attempt=2, text=None, ms=None, sources=[], error="malformed"),
    ])
    llm = NoLlm()
    async with make_pool(settings, schema=settings.pg_schema) as pool:
        stage = SummaryStage(llm, PostgresWindowReads(pool))

        async def ask(conversation: dict, attempt: int):
            request = new_event(SUMMARY_REQUESTED, SummaryRequested(**WINDOW, attempt=attempt), **conversation)
            answer = await stage.handle(decode(encode(request), key=request.key))
            return None if answer is None else decode(encode(answer), key=request.key)  # checked as a fold would

        again = await ask(done, 2)  # re-issued by a fold that never saw attempt 1's result
        assert again.type == SUMMARY_COMPLETED and again.envelope.conversation_id == "done"
        assert (again.payload.memory_id, again.payload.attempt, again.payload.text) == (1, 1, "the summary")
        assert (again.payload.generation_time_ms, again.payload.source_event_ids) == (7, ["e0", "e1"])
        assert (await ask(done, 1)).type == SUMMARY_COMPLETED  # redelivered: the same answer

        failure = await ask(failed, 2)
        assert failure.type == SUMMARY_FAILED
        assert (failure.payload.attempt, failure.payload.error) == (2, "malformed")
        assert await ask(failed, 1) is None  # an older attempt than the row's: the newer one answered
    assert llm.calls == 0

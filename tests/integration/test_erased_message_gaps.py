"""Seqs the messages projector left out because their erasure was applied first
(`erased_messages`, docs/lineage.md "Messages reached after the erasure") are gaps for the
summary and chunk stages, not messages still to be projected: a window with a dropped seq is
summarized from the rest, and a window or range of nothing but dropped seqs fails at once
instead of waiting for messages that will never be projected."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import psycopg
import pytest

from core.llm.port import SummaryOutput
from runtime.db import make_pool
from schemas import facts_events as fe
from schemas.codec import decode, encode, new_event
from schemas.events import SummaryRequested
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_FAILED, SUMMARY_REQUESTED
from projections.chunk_reads import PostgresChunkReads
from streams.facts.stage import ChunkStage
from projections.window_reads import PostgresWindowReads
from streams.window.summarize import SummaryStage

WAIT_S = 600.0  # how long a stage would wait for a missing message: far beyond the test's bound


class Llm:
    model = "m"
    prompt_version = "summary-v1"

    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    async def summarize_window(self, *, new_messages, **_):
        self.seen.append([m.seq for m in new_messages])
        return SummaryOutput(text="summary", prompt_version=self.prompt_version, model=self.model)


async def setup(settings) -> None:
    """Bob's conversation with seqs 1 and 3 dropped; alice's, every seq 0..3 dropped (no row)."""
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
        for seq in (0, 2):
            await conn.execute(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, occurred_at,"
                " source_partition, source_offset) VALUES ('t', 'mixed', %s, %s, 'bob', 'user', 'hello', %s, 0, %s)",
                (seq, f"e{seq}", datetime.now(UTC), seq))
        await conn.execute("INSERT INTO conversations (tenant_id, conversation_id, user_id, last_seq, message_count)"
                           " VALUES ('t', 'mixed', 'bob', 2, 2)")
        await conn.execute(
            "INSERT INTO erased_messages (tenant_id, conversation_id, seq, event_id, erasure_event_id)"
            " SELECT 't', c, s, c || s, 'erasure' FROM (VALUES ('mixed', 1), ('mixed', 3), ('gone', 0), ('gone', 1),"
            " ('gone', 2), ('gone', 3)) AS x(c, s)")
        await conn.commit()


def summary_request(conversation: str):
    request = new_event(SUMMARY_REQUESTED, SummaryRequested(memory_id=1, start_seq=0, end_seq=3,
                                                              prompt_version="summary-v1", model="m"),
                        tenant_id="t", conversation_id=conversation, user_id="bob", seq=3)
    return decode(encode(request), key=request.key)


def chunk_request(conversation: str):
    request = new_event(fe.CHUNK_REQUESTED, fe.ChunkRequested(start_seq=0, end_seq_exclusive=4, prompt_version="p",
                                                              model="m"),
                        tenant_id="t", conversation_id=conversation, user_id="bob", seq=3)
    return decode(encode(request), key=request.key)


@pytest.mark.asyncio
async def test_summary_and_chunk_stages_count_dropped_seqs_as_gaps(settings):
    await setup(settings)
    llm = Llm()
    async with make_pool(settings, schema=settings.pg_schema) as pool:
        summaries = SummaryStage(llm, PostgresWindowReads(pool), inputs_wait_s=WAIT_S)
        mixed = await answer(summaries, summary_request("mixed"))
        assert mixed.type == SUMMARY_COMPLETED and mixed.payload.source_event_ids == ["e0", "e2"]
        assert llm.seen == [[0, 2]]  # the window was summarized from what remains
        gone = await answer(summaries, summary_request("gone"))
        assert gone.type == SUMMARY_FAILED and "every message of the window was erased" in gone.payload.error
        assert llm.seen == [[0, 2]]  # no LLM call on nothing

        chunks = ChunkStage(None, None, PostgresChunkReads(pool), inputs_wait_s=WAIT_S)
        inputs = await asyncio.wait_for(chunks._inputs(*_cause(chunk_request("mixed"))), 60)
        assert [m.seq for m in inputs.messages] == [0, 2] and inputs.owner_user_id == "bob"
        failed = await answer(chunks, chunk_request("gone"))
        assert failed.type == fe.CHUNK_FAILED and "every message 0..3 was erased" in failed.payload.error


async def answer(stage, request):
    """The stage's answer, checked as a fold would read it (bounded: a stage that waited for
    the dropped messages would not answer within the bound)."""
    envelope = await asyncio.wait_for(stage.handle(request), 60)
    return decode(encode(envelope), key=envelope.key)


def _cause(event):
    return event.envelope, event.payload

"""Gathers the rows a turn-start context needs and assembles the response (seed 000/002 read side)."""

from __future__ import annotations

import psycopg

from typing import Any

from core import telemetry
from api.schemas import ContextMessage, ContextOut, SummaryOut, Watermark
from retrieval.request import ContextRequest
from api.sections.retrieval import retrieval_section
from api.sections.topic import topic_section
from projections import queries
from streams.window.context import MemoryRow, Message, assemble_context


async def build_turn_context(
    conn: psycopg.AsyncConnection, request: ContextRequest, *, min_seq: int | None, app_state: Any
) -> ContextOut:
    conversation, before_seq = request.conversation, request.before_seq
    tenant, conversation_id = conversation.tenant_id, conversation.conversation_id
    memory = await queries.list_memory(conn, tenant, conversation_id, limit=20)
    rows = [
        MemoryRow(m.memory_id, m.start_sequence, m.end_sequence, m.base_memory_id, m.status, m.memory_text)
        for m in memory
    ]
    # Only messages after the newest completed summary can be in the gap.
    completed_ends = [
        r.end_seq for r in rows if r.status == "completed" and (before_seq is None or r.end_seq < before_seq)
    ]
    after = max(completed_ends, default=-1)
    limits = app_state.settings.window
    # One more than the limit: assemble_context then sees that older messages were left out.
    messages = await queries.list_messages(
        conn, tenant, conversation_id, after_seq=after, before_seq=before_seq,
        limit=limits.context_max_gap_messages + 1, newest=True,
    )
    assembled = assemble_context(
        rows, [Message(m.seq, m.role, m.content) for m in messages], before_seq,
        max_messages=limits.context_max_gap_messages, max_bytes=limits.context_max_gap_bytes,
    )
    # The first gap seq returned verbatim (older ones are summarized or named as omitted).
    verbatim_from_seq = assembled.gap[0].seq if assembled.gap else None
    omitted = assembled.omitted
    omitted_count = await queries.count_messages(conn, tenant, conversation_id, *omitted) if omitted else 0

    expected_up_to = max(conversation.last_seq, min_seq if min_seq is not None else -1)
    if before_seq is not None:
        expected_up_to = min(expected_up_to, before_seq - 1)
    # The listing holds every message of the range unless it was cut at its limit: then the
    # missing seqs (and the retrieval's last turns) need no statement of their own.
    listed_all = len(messages) <= limits.context_max_gap_messages
    if expected_up_to <= after:
        missing = []
    elif listed_all:
        missing = queries.missing_in([m.seq for m in messages], expected_up_to, after_seq=after)
    else:
        missing = await queries.missing_seqs(conn, tenant, conversation_id, expected_up_to, after_seq=after)
    last_messages = app_state.settings.retrieval.last_messages
    recent = ([(m.content, m.occurred_at) for m in reversed(messages)]
              if after < 0 or len(messages) >= max(last_messages, 1) else None)
    by_id = {m.memory_id: m for m in memory}
    summary = None
    if assembled.summary is not None:
        row = by_id[assembled.summary.memory_id]
        summary = SummaryOut(
            memory_id=row.memory_id, start_seq=row.start_sequence, end_seq=row.end_sequence,
            text=row.memory_text or "", prompt_version=row.prompt_version, model=row.model,
        )
    occurred = {m.seq: m.occurred_at for m in messages}
    return ContextOut(
        conversation_id=conversation_id,
        mode=assembled.mode,
        summary=summary,
        messages=[
            ContextMessage(seq=m.seq, role=m.role, content=m.content, occurred_at=occurred[m.seq])
            for m in assembled.gap
        ],
        watermark=Watermark(
            last_seq=conversation.last_seq,
            summary_end_seq=assembled.summary_end_seq,
            requested_min_seq=min_seq,
            complete=not missing,
            missing_seqs=missing,
            verbatim_from_seq=verbatim_from_seq,
            gap_omitted_from_seq=omitted[0] if omitted else None,
            gap_omitted_to_seq=omitted[1] if omitted else None,
            gap_omitted_count=omitted_count,
        ),
        retrieved=await telemetry.traced("context retrieval", retrieval_section(
            conn, request, app_state, verbatim_from_seq=min((m.seq for m in assembled.gap), default=None),
            recent=recent)),
        # Without the topics system no fold places the message: waiting for it (the section's
        # `context_wait_ms`) would cost every context half a second for nothing.
        active_topic=await telemetry.traced("context topic", topic_section(conn, request, app_state))
        if "topics" in app_state.settings.systems else None,
    )

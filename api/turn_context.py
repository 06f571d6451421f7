"""Gathers the rows a turn-start context needs and assembles the response."""

from __future__ import annotations

import psycopg

from api.schemas import ContextMessage, ContextOut, Watermark
from projections import queries
from projections.queries import ConversationRow


async def build_turn_context(
    conn: psycopg.AsyncConnection, conversation: ConversationRow, *, before_seq: int | None, min_seq: int | None
) -> ContextOut:
    tenant, conversation_id = conversation.tenant_id, conversation.conversation_id
    messages = await queries.list_messages(conn, tenant, conversation_id, before_seq=before_seq)
    expected_up_to = max(conversation.last_seq, min_seq if min_seq is not None else -1)
    if before_seq is not None:
        expected_up_to = min(expected_up_to, before_seq - 1)
    missing = await queries.missing_seqs(conn, tenant, conversation_id, expected_up_to) if expected_up_to >= 0 else []
    return ContextOut(
        conversation_id=conversation_id,
        mode="raw",
        summary=None,
        messages=[ContextMessage(seq=m.seq, role=m.role, content=m.content, occurred_at=m.occurred_at) for m in messages],
        watermark=Watermark(
            last_seq=conversation.last_seq,
            summary_end_seq=None,
            requested_min_seq=min_seq,
            complete=not missing,
            missing_seqs=missing,
        ),
    )

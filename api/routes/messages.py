"""Conversation message history."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from api.auth import conversation_user
from api.deps import ConnDep, PrincipalDep
from api.routes.context import MAX_SEQ, ConversationId
from projections import queries

router = APIRouter(prefix="/v1/conversations", tags=["history"])


class MessageOut(BaseModel):
    seq: int
    event_id: str
    role: str
    content: str
    metadata: dict[str, Any]
    occurred_at: datetime


class HistoryOut(BaseModel):
    conversation_id: str
    last_seq: int
    messages: list[MessageOut]
    next_after_seq: int | None


@router.get("/{conversation_id}/messages", response_model=HistoryOut)
async def history(
    principal: PrincipalDep,
    conn: ConnDep,
    conversation_id: str = ConversationId,
    after_seq: int = Query(-1, ge=-1, le=MAX_SEQ, description="Return messages with seq > after_seq"),
    limit: int = Query(100, ge=1, le=1000),
) -> HistoryOut:
    """Projected messages in seq order, paged by `after_seq` (the conversation's owner, or a key
    allowed to act as that owner)."""
    tenant = principal.tenant
    conversation = await queries.get_conversation(conn, tenant, conversation_id)
    if conversation is None or conversation_user(principal, conversation.user_id, None, "history") is None:
        raise HTTPException(404, detail=f"conversation {conversation_id!r} not found")
    rows = await queries.list_messages(conn, tenant, conversation_id, after_seq=after_seq, limit=limit)
    more = len(rows) == limit and rows[-1].seq < conversation.last_seq
    return HistoryOut(
        conversation_id=conversation_id,
        last_seq=conversation.last_seq,
        messages=[MessageOut(**vars(r)) for r in rows],
        next_after_seq=rows[-1].seq if more else None,
    )

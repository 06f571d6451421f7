"""The tenant's conversations (counts, last activity, lag) and a conversation's summary chain."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from api.auth import conversation_user, may_read_tenant
from api.deps import ConnDep, PrincipalDep
from api.routes.context import ConversationId
from api.routes.search import storable_text
from projections import queries
from projections import surface_queries as sq

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])


class ConversationOut(BaseModel):
    conversation_id: str
    user_id: str
    subject_id: str | None
    last_seq: int
    message_count: int
    gap_count: int = Field(description="Missing seqs the projector observed")
    first_seen_at: datetime
    last_message_at: datetime | None = Field(description="occurred_at of the newest projected message")
    summaries: int = Field(description="Summary rows, every status")
    summary_end_seq: int | None = Field(description="The newest completed summary covers messages up to this seq")
    summary_lag: int = Field(description="Messages after the newest completed summary")
    chunks: int
    facts: int = Field(description="Current facts extracted from this conversation")
    topics: int


class ConversationsOut(BaseModel):
    total: int = Field(description="Conversations that match q")
    limit: int
    offset: int
    conversations: list[ConversationOut]


@router.get("", response_model=ConversationsOut)
async def list_conversations(
    principal: PrincipalDep, conn: ConnDep,
    q: str | None = Query(None, max_length=200, description="Part of the conversation, user or subject id"),
    limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=1_000_000),
) -> ConversationsOut:
    """The tenant's conversations, most recently updated first (a key bound to a user: its own;
    a producer key, act_as nobody: 403)."""
    if principal.user is None:
        may_read_tenant(principal, "conversations")
    storable_text(q, "q")
    rows, total = await sq.list_conversations(conn, principal.tenant, q=q, user_id=principal.user,
                                              limit=limit, offset=offset)
    return ConversationsOut(total=total, limit=limit, offset=offset, conversations=[
        ConversationOut(**vars(row), summary_lag=row.summary_lag) for row in rows])


class SummaryVersionOut(BaseModel):
    memory_id: int
    base_memory_id: int | None = Field(description="The summary this one was built on (the version chain)")
    start_seq: int
    end_seq: int = Field(description="Inclusive")
    status: str = Field(description="processing | completed | failed")
    attempt: int
    error: str | None
    text: str | None
    prompt_version: str
    model: str
    generation_time_ms: int | None
    source_event_ids: list[str]
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None


class SummariesOut(BaseModel):
    conversation_id: str
    last_seq: int
    summaries: list[SummaryVersionOut] = Field(description="Oldest first")
    counts: dict[str, int] = Field(description="Rows by status")


@router.get("/{conversation_id}/summaries", response_model=SummariesOut)
async def summaries(principal: PrincipalDep, conn: ConnDep, conversation_id: str = ConversationId,
                    limit: int = Query(200, ge=1, le=2000, description="The newest this many rows")) -> SummariesOut:
    """The rolling summary's version chain (seed 000): each row's range, status, attempt, failure,
    generation time and the summary it was built on."""
    conversation = await queries.get_conversation(conn, principal.tenant, conversation_id)
    if conversation is None or conversation_user(principal, conversation.user_id, None, "summaries") is None:
        raise HTTPException(404, detail=f"conversation {conversation_id!r} not found")
    rows = await sq.summary_chain(conn, principal.tenant, conversation_id, limit=limit)
    counts = {status: sum(r["status"] == status for r in rows) for status in ("processing", "completed", "failed")}
    return SummariesOut(conversation_id=conversation_id, last_seq=conversation.last_seq, counts=counts,
                        summaries=[SummaryVersionOut(**row) for row in rows])

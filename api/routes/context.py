"""The main call: what a chat service should prepend at the start of a turn."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException, Query, Request

from api.deps import ConnDep, SettingsDep, TenantDep
from api.schemas import ContextOut
from api.sections.request import ContextRequest
from projections import queries
from api.turn_context import build_turn_context

router = APIRouter(prefix="/v1/conversations", tags=["context"])


@router.get("/{conversation_id}/context", response_model=ContextOut)
async def turn_context(
    conversation_id: str,
    tenant: TenantDep,
    conn: ConnDep,
    settings: SettingsDep,
    before_seq: int | None = Query(
        None, ge=0, description="The current message's seq: it and anything after are left out"
    ),
    min_seq: int | None = Query(
        None, ge=0, description="The caller has written up to this seq: wait briefly for the projection"
    ),
    wait_ms: int = Query(1000, ge=0, description="How long to wait for min_seq (capped by the server)"),
    query: str | None = Query(
        None, max_length=8000, description="The current message: retrieval finds facts and memories relevant to it"
    ),
    user_id: str | None = Query(None, description="Whose memory (default: the conversation's user)"),
    subject_id: str | None = Query(None, description="Who or what it is about (default: the conversation's)"),
    budget_tokens: int = Query(500, ge=0, le=8000, description="Token budget for retrieved items"),
    *,
    request: Request,
) -> ContextOut:
    """Latest completed summary + the gap messages after it, relevant memories and the active topic,
    with the watermark it reflects."""
    conversation = await _wait_for(conn, tenant, conversation_id, min_seq, min(wait_ms, settings.api.max_wait_ms))
    if conversation is None:
        raise HTTPException(404, detail=f"conversation {conversation_id!r} not found")
    wanted = ContextRequest(
        conversation=conversation,
        user_id=user_id or conversation.user_id,
        subject_id=subject_id if subject_id is not None else conversation.subject_id,
        query=query,
        before_seq=before_seq,
        budget_tokens=budget_tokens,
        now=datetime.now(UTC),
    )
    return await build_turn_context(conn, wanted, min_seq=min_seq, app_state=request.app.state)


async def _wait_for(conn, tenant: str, conversation_id: str, min_seq: int | None, wait_ms: int):
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        conversation = await queries.get_conversation(conn, tenant, conversation_id)
        await conn.rollback()  # a fresh snapshot on every poll
        reached = conversation is not None and (min_seq is None or conversation.last_seq >= min_seq)
        if reached or time.monotonic() >= deadline:
            return conversation
        await asyncio.sleep(0.02)

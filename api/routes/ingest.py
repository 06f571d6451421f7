"""HTTP ingest for chat services that are not written in Python."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Request, status
from pydantic import BaseModel, ConfigDict, Field

from api.auth import writer_may_append
from api.deps import ClientDep, PrincipalDep, append_or_503
from api.routes.context import ConversationId
from projections import queries
from memory_agent import metrics
from schemas.envelope import InvalidEvent

router = APIRouter(prefix="/v1/conversations", tags=["ingest"])


class MessageIn(BaseModel):
    """One chat message; the tenant comes from the API key."""

    model_config = ConfigDict(extra="forbid")

    user_id: Any = Field(description="The user who owns the conversation")
    seq: Any = Field(description="0-based position in the conversation, set by the producer")
    role: Any = Field(description="user | assistant | system | tool")
    content: Any
    subject_id: Any = None
    metadata: dict[str, Any] | None = None
    event_id: Any = Field(None, description="Idempotency key; generated when omitted")
    occurred_at: datetime | None = None


class Appended(BaseModel):
    event_id: str
    conversation_id: str
    seq: int
    partition: int
    offset: int


@router.post("/{conversation_id}/messages", status_code=status.HTTP_202_ACCEPTED, response_model=Appended)
async def append_message(body: MessageIn, principal: PrincipalDep, client: ClientDep, request: Request,
                         conversation_id: str = ConversationId) -> Appended:
    """Validate and append to the conversation log. 422 with a reason code on bad input."""
    tenant = principal.tenant
    await _may_append(request, principal, conversation_id, body.user_id)
    try:
        envelope = client.message_event(tenant_id=tenant, conversation_id=conversation_id, **body.model_dump())
    except InvalidEvent as exc:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, detail={"reason": exc.reason, "message": exc.detail}
        ) from None
    meta = await append_or_503(request, envelope)
    metrics.INGESTED.inc()
    return Appended(
        event_id=envelope.event_id, conversation_id=conversation_id, seq=envelope.seq,
        partition=meta.partition, offset=meta.offset,
    )


async def _may_append(request: Request, principal, conversation_id: str, user_id: object) -> None:
    """A key bound to a user appends as that user, to its own conversations only."""
    if principal.user is None:
        return
    owner = None
    if user_id == principal.user:
        async with request.app.state.pool.connection(timeout=request.app.state.settings.api.pool_timeout_s) as conn:
            await request.app.state.generation.use(conn)
            found = await queries.get_conversation(conn, principal.tenant, conversation_id)
            owner = found.user_id if found else None
    writer_may_append(principal, user_id, owner)

"""HTTP ingest for chat services that are not written in Python."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, ConfigDict, Field

from api.deps import ClientDep, TenantDep
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
async def append_message(conversation_id: str, body: MessageIn, tenant: TenantDep, client: ClientDep) -> Appended:
    """Validate and append to the conversation log. 422 with a reason code on bad input."""
    try:
        envelope = client.message_event(tenant_id=tenant, conversation_id=conversation_id, **body.model_dump())
    except InvalidEvent as exc:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, detail={"reason": exc.reason, "message": exc.detail}
        ) from None
    try:
        meta = await client.append(envelope)
    except Exception as exc:  # noqa: BLE001 - Kafka unavailable, timeouts
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=f"could not append to the log: {exc}") from None
    metrics.INGESTED.inc()
    return Appended(
        event_id=envelope.event_id, conversation_id=conversation_id, seq=envelope.seq,
        partition=meta.partition, offset=meta.offset,
    )

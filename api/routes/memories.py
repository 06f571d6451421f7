"""Memory stored by hand (an event in the log, like every write) and a user's memory export."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from datetime import date, datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from api.errors import one_line
from api.auth import named_user
from api.deps import ConnDep, PrincipalDep, append_or_503
from api.routes.search import UserHeader
from projections import surface_queries as sq
from retrieval.service import document_embedder_for
from schemas import facts_events as fe
from schemas.codec import new_event
from schemas.envelope import IDENTIFIER, InvalidEvent
from streams.facts.extraction import MEMORY_TYPES
from domain.facts.ids import stored_fact_id, to_vector

router = APIRouter(prefix="/v1", tags=["memory"])
MAX_WAIT_MS = 30_000
MemoryType = Literal[MEMORY_TYPES]  # type: ignore[valid-type]


class MemoryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=4000, description="The memory, one or a few sentences")
    category: str = Field("other", min_length=1, max_length=100, pattern=r"^[\w .:/-]+$",
                          description="A label, e.g. infrastructure, preference, occupation")
    memory_type: MemoryType = Field("general", description="Seed 001's memory type")  # type: ignore[valid-type]
    importance: int = Field(3, ge=1, le=5, description="1 (trivial) to 5 (critical)")
    tags: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(default_factory=list, max_length=20)
    visibility: Literal["private", "shared"] = Field("private", description="shared: other users of the subject"
                                                                           " see it (seed 003)")
    subject_id: str | None = Field(None, pattern=IDENTIFIER, max_length=200, description="Who or what it is about")
    user_id: str | None = Field(None, pattern=IDENTIFIER, max_length=200, description="Same as X-User-Id")


class StoredOut(BaseModel):
    """The memory is in the log; `projected` says whether search and /v1/facts show it yet."""

    event_id: str
    fact_id: str = Field(description="The new fact's id (if dedup merged it: see stored_as)")
    user_id: str
    projected: bool
    outcome: Literal["stored", "merged"] | None = Field(None, description="Once projected: a new fact, or merged"
                                                                          " into a near-identical one")
    stored_as: str | None = Field(None, description="Once projected: the fact that holds it")


def memories_stream(user: str) -> str:
    """The log key of a user's hand-stored memories (one ordered stream per user)."""
    name = f"memories-{user}"
    return name if len(name) <= 200 else f"memories-{hashlib.sha256(user.encode()).hexdigest()}"


@router.post("/memories", status_code=status.HTTP_202_ACCEPTED, response_model=StoredOut,
             responses={503: {"description": "The embedder or the log (Kafka) is unavailable"}})
async def store_memory(body: MemoryIn, request: Request, principal: PrincipalDep, conn: ConnDep,
                       x_user_id: UserHeader = None,
                       wait: bool = Query(False, description="Wait until search shows it"),
                       wait_ms: int = Query(5000, ge=0, le=MAX_WAIT_MS, description="How long to wait at most")
                       ) -> StoredOut:
    """Append a `memory.stored` event (embedded here, so a replay dedups it the same way); the facts
    projector applies it like an extracted fact: merged into a near-identical one, or a new fact."""
    if x_user_id and body.user_id and x_user_id != body.user_id:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail="X-User-Id and user_id name different users")
    user, tenant = named_user(principal, x_user_id or body.user_id, "store memory"), principal.tenant
    content = one_line(body.content, "content")
    embedder = document_embedder_for(request.app.state)  # the worker's graph (retrieval/service.py)
    try:
        vector = to_vector((await embedder.embed_documents([content]))[0], embedder.model)
    except Exception as exc:  # noqa: BLE001 - embedding provider down
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=f"could not embed the content: {exc}",
                            headers={"Retry-After": "1"}) from None
    event_id = str(uuid.uuid4())
    fact_id = stored_fact_id(tenant, event_id)
    envelope = new_event(fe.MEMORY_STORED, _payload(body, fact_id, user, content, vector), tenant_id=tenant,
                         user_id=user, subject_id=body.subject_id, conversation_id=memories_stream(user),
                         event_id=event_id)
    try:  # every rule a consumer checks (NUL, surrogates, sizes): refused here, nothing appended
        request.app.state.client.validate_event(envelope.model_dump(mode="json"))
    except InvalidEvent as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            detail={"reason": exc.reason, "message": exc.detail}) from None
    await conn.rollback()
    await append_or_503(request, envelope)
    outcome = None
    if wait:
        deadline = time.monotonic() + min(wait_ms, MAX_WAIT_MS) / 1000
        while (outcome := await sq.stored_outcome(conn, tenant, user, fact_id, envelope.event_id)) is None:
            await conn.rollback()  # a fresh snapshot on every poll
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
    return StoredOut(event_id=envelope.event_id, fact_id=fact_id, user_id=user, projected=outcome is not None,
                     outcome=outcome[1] if outcome else None, stored_as=outcome[0] if outcome else None)


def _payload(body: MemoryIn, fact_id: str, user: str, content: str, vector: fe.Vector) -> fe.MemoryStored:
    return fe.MemoryStored(fact_id=fact_id, owner_user_id=user, subject_id=body.subject_id, category=body.category,
                           memory_type=body.memory_type, content=content, importance=body.importance,
                           tags=list(dict.fromkeys(body.tags)), visibility=body.visibility, embedding=vector)


def _json(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    raise TypeError


@router.get("/export", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {}},
                             "description": "JSON Lines: one fact, chunk or summary per line, with provenance"}})
async def export(request: Request, principal: PrincipalDep, x_user_id: UserHeader = None,
                 user_id: str | None = Query(None, pattern=IDENTIFIER, max_length=200,
                                             description="Same as X-User-Id")) -> StreamingResponse:
    """The user's memory as JSON Lines, streamed: their facts (every version; superseded and deleted
    ones carry valid_to / deleted_at), their conversations' chunks and completed summaries, each
    with its provenance (conversation, message range [start, end), event ids, dates)."""
    if x_user_id and user_id and x_user_id != user_id:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail="X-User-Id and user_id name different users")
    user, tenant = named_user(principal, x_user_id or user_id, "export memory"), principal.tenant
    state = request.app.state

    async def lines() -> AsyncIterator[bytes]:
        async with state.tenant_slots.hold(tenant), state.pool.connection(timeout=state.settings.api.pool_timeout_s) \
                as conn:
            await state.generation.use(conn)
            async for row in sq.export_rows(conn, tenant, user):
                if row.get("range_start") is not None:
                    row["message_range"] = [row.pop("range_start"), row.pop("range_end")]
                else:
                    row.pop("range_start", None), row.pop("range_end", None)
                    row["message_range"] = None
                yield orjson.dumps({"user_id": user, **row}, default=_json) + b"\n"

    filename = f"memory-{tenant}-{user}.jsonl"
    return StreamingResponse(lines(), media_type="application/x-ndjson",
                             headers={"Content-Disposition": f'attachment; filename="{filename}"'})

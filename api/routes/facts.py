"""Fact management (seed 003's review UI): list, read, edit, share/unshare, delete — owners only.

The API key selects the tenant and the acting user: a key bound to a user acts as it; a service
key granted `act_as: any_user` names the user with `X-User-Id` (docs/security.md). Writes are checked against
the read model and appended to the conversation log as events (a replay keeps them).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Query, Request, status
from pydantic import BaseModel, ConfigDict, Field

from api.errors import one_line
from api.auth import Principal, named_user
from api.deps import ConnDep, PrincipalDep, append_or_503
from api.routes.context import named_in
from projections import fact_queries as q
from retrieval.service import document_embedder_for
from schemas import facts_events as fe
from schemas.codec import new_event
from schemas.envelope import IDENTIFIER
from schemas.registry import REGISTRY
from domain.facts.ids import to_vector

router = APIRouter(prefix="/v1/facts", tags=["facts"])
UserHeader = Annotated[str | None, Header(alias="X-User-Id", pattern=IDENTIFIER, max_length=200,
                                          description="The acting user, for a service key granted act_as any_user"
                                                      " (a user key acts as its own user)")]
MAX_WAIT_MS = 30_000


class FactLink(BaseModel):
    relationship: str
    direction: Literal["outgoing", "incoming"]
    fact_id: str


class FactOut(BaseModel):
    fact_id: str
    owner_user_id: str
    mine: bool
    subject_id: str | None
    category: str
    memory_type: str
    content: str
    importance: int
    tags: list[str]
    visibility: str
    source_conversation_id: str | None
    source_chunk_id: str | None
    source_event_ids: list[str]
    embedding_model: str
    extracted_by: str
    prompt_version: str
    access_count: int
    last_accessed_at: datetime | None
    valid_from: datetime
    valid_to: datetime | None
    created_at: datetime
    updated_at: datetime
    links: list[FactLink] = Field(default_factory=list)


class FactsOut(BaseModel):
    user_id: str
    subject_id: str | None
    facts: list[FactOut]


class ContentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=4000)


class VisibilityIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    visibility: Literal["private", "shared"]


class Accepted(BaseModel):
    """The decision is in the log; `projected` says whether the read model shows it yet."""

    event_id: str
    fact_id: str
    projected: bool
    fact: FactOut | None = None


def _out(row: q.FactRow, user_id: str, links: list[q.LinkRow]) -> FactOut:
    fields = {k: v for k, v in row.__dict__.items() if k in FactOut.model_fields}
    own_links = []
    for link in links:
        if link.from_fact_id == row.fact_id:
            own_links.append(FactLink(relationship=link.relationship, direction="outgoing", fact_id=link.to_fact_id))
        elif link.to_fact_id == row.fact_id:
            own_links.append(FactLink(relationship=link.relationship, direction="incoming", fact_id=link.from_fact_id))
    return FactOut(**fields, mine=row.owner_user_id == user_id, links=own_links)


def _acting_user(principal: Principal, action: str, header: str | None, query: str | None = None) -> str:
    return named_user(principal, named_in(header, query), action)


async def _visible(conn, tenant: str, fact_id: str, user: str) -> q.FactRow:
    row = await q.get_fact(conn, tenant, fact_id)
    if row is None or not row.visible_to(user):
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"fact {fact_id!r} not found")
    return row


async def _owned(conn, tenant: str, fact_id: str, user: str) -> q.FactRow:
    row = await _visible(conn, tenant, fact_id, user)
    if row.owner_user_id != user:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="only the fact's owner can change it")
    return row


@router.get("", response_model=FactsOut)
async def list_facts(
    principal: PrincipalDep, conn: ConnDep, x_user_id: UserHeader = None,
    user_id: str | None = Query(None, pattern=IDENTIFIER, description="Same as X-User-Id"),
    subject_id: str | None = Query(None, description="Only this subject (default: every subject)"),
    include_superseded: bool = Query(False, description="Also my superseded facts (history)"),
) -> FactsOut:
    """My facts plus the facts other users shared (seed 003), current ones first by validity."""
    user, tenant = _acting_user(principal, "list facts", x_user_id, user_id), principal.tenant
    rows = await q.list_facts(conn, tenant, user, subject_id, any_subject=subject_id is None,
                              include_superseded=include_superseded)
    links = await q.links_of(conn, [r.fact_id for r in rows])
    return FactsOut(user_id=user, subject_id=subject_id, facts=[_out(r, user, links) for r in rows])


@router.get("/{fact_id}", response_model=FactOut)
async def get_fact(fact_id: str, principal: PrincipalDep, conn: ConnDep, x_user_id: UserHeader = None) -> FactOut:
    user = _acting_user(principal, "read fact", x_user_id)
    row = await _visible(conn, principal.tenant, fact_id, user)
    return _out(row, user, await q.links_of(conn, [fact_id]))


async def _append(conn, request: Request, row: q.FactRow, user: str, event_type: str, wait: bool, wait_ms: int,
                  **fields: Any) -> Accepted:
    """Append one management event (keyed by the fact's source conversation); optionally wait."""
    stored = await q.stored_embedding(conn, row.tenant_id, row.fact_id)
    snapshot = None if stored is None else fe.Vector(model=row.embedding_model, dimensions=len(stored), values=stored)
    payload = REGISTRY[event_type].payload(fact_id=row.fact_id, owner_user_id=row.owner_user_id,
                                           subject_id=row.subject_id, content_snapshot=row.content,
                                           snapshot_embedding=snapshot, **fields)
    envelope = new_event(event_type, payload, tenant_id=row.tenant_id, user_id=user, subject_id=row.subject_id,
                         conversation_id=row.source_conversation_id or f"fact-{row.fact_id}")
    await conn.rollback()
    await append_or_503(request, envelope)
    projected = False
    if wait:
        deadline = time.monotonic() + min(wait_ms, MAX_WAIT_MS) / 1000
        while not (projected := await q.decision_projected(conn, row.tenant_id, envelope.event_id)):
            await conn.rollback()  # a fresh snapshot on every poll
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
    fact = None
    if projected:
        now = await q.get_fact(conn, row.tenant_id, row.fact_id)
        if now is not None and now.visible_to(user):
            fact = _out(now, user, await q.links_of(conn, [row.fact_id]))
    return Accepted(event_id=envelope.event_id, fact_id=row.fact_id, projected=projected, fact=fact)


WaitQuery = Annotated[bool, Query(description="Wait until the read model shows the change")]
WaitMsQuery = Annotated[int, Query(ge=0, le=MAX_WAIT_MS, description="How long to wait at most")]


@router.patch("/{fact_id}", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
async def edit_fact(fact_id: str, body: ContentIn, request: Request, principal: PrincipalDep, conn: ConnDep,
                    x_user_id: UserHeader = None,
                    wait: WaitQuery = False, wait_ms: WaitMsQuery = 5000) -> Accepted:
    """Rewrite the content (owner only); the new wording is embedded here so every replay gets the same vector."""
    user = _acting_user(principal, "edit fact", x_user_id)
    row = await _owned(conn, principal.tenant, fact_id, user)
    content = one_line(body.content, "content")
    embedder = document_embedder_for(request.app.state)  # the worker's graph (retrieval/service.py)
    try:
        vector = to_vector((await embedder.embed_documents([content]))[0], embedder.model)
    except Exception as exc:  # noqa: BLE001 - embedding provider down
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=f"could not embed the content: {exc}") from None
    return await _append(conn, request, row, user, fe.FACT_EDITED, wait, wait_ms,
                         new_content=content, new_embedding=vector)


@router.patch("/{fact_id}/visibility", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
async def change_visibility(fact_id: str, body: VisibilityIn, request: Request, principal: PrincipalDep,
                            conn: ConnDep, x_user_id: UserHeader = None,
                            wait: WaitQuery = False, wait_ms: WaitMsQuery = 5000) -> Accepted:
    """Share with the subject's other users, or make private again (owner only)."""
    user = _acting_user(principal, "change fact visibility", x_user_id)
    row = await _owned(conn, principal.tenant, fact_id, user)
    return await _append(conn, request, row, user, fe.FACT_VISIBILITY_CHANGED, wait, wait_ms,
                         visibility=body.visibility)


@router.delete("/{fact_id}", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
async def delete_fact(fact_id: str, request: Request, principal: PrincipalDep, conn: ConnDep,
                      x_user_id: UserHeader = None, wait: WaitQuery = False,
                      wait_ms: WaitMsQuery = 5000) -> Accepted:
    """Hide the fact everywhere (owner only); its history is kept."""
    user = _acting_user(principal, "delete fact", x_user_id)
    row = await _owned(conn, principal.tenant, fact_id, user)
    return await _append(conn, request, row, user, fe.FACT_DELETED, wait, wait_ms)

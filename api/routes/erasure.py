"""Erasure (docs/lineage.md): forget a user or a conversation. The request appends a
`user.erased` / `conversation.erased` event to the conversation log and answers 202 with its
id; the `erasure` projector deletes what was derived from it (projections/erasure.py). A
request repeated while the last one is in flight gets that one back, and one tenant's
erasure requests run one at a time (api/erasure_requests.py, docs/security.md)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Annotated

import psycopg

from fastapi import APIRouter, HTTPException, Path, Query, Request, Security, status
from pydantic import BaseModel, Field

from api import erasure_requests
from api.auth import conversation_user, forbidden
from api.deps import (ConnDep, PrincipalDep, admin_key_header, api_key_header, append_or_503,
                      bound_key_names_another)
from api.routes.context import ConversationId, UserIdHeader, named_in
from core import privacy
from retrieval.service import forget_texts
from schemas import erasure_events as ee
from schemas.codec import new_event
from schemas.envelope import IDENTIFIER

router = APIRouter(tags=["erasure"])


class ErasureAccepted(BaseModel):
    event_id: str = Field(description="The erasure event on the log; `erasures` holds it once applied")
    tenant_id: str
    erased: str = Field(description="'user' or 'conversation'")
    id: str
    already_requested: bool = Field(False, description="An erasure of the same user or conversation was still in"
                                                       " flight: `event_id` is that request's, nothing was appended")


def forget_query_vectors(request: Request) -> None:
    """This process's cached query vectors go (retrieval/query_cache.py): one of them may be the
    erased user's question; so do the read path's caches of memory text (retrieval.service.
    forget_texts: lines, their token counts, a restored archive's words), and the conversations'
    users and subjects the context route remembers for its guessed first read (api.routes.
    context._remember: the erased user's identifiers among them). Other API processes keep
    theirs until evicted (docs/lineage.md)."""
    embedder = getattr(request.app.state, "retrieval_embedder", None)
    if embedder is not None and hasattr(embedder, "clear"):
        embedder.clear()
    forget_texts()
    owners = getattr(request.app.state, "conversation_owners", None)
    if owners:
        owners.clear()


@contextlib.asynccontextmanager
async def _read_model(request: Request, tenant: str) -> AsyncIterator[psycopg.AsyncConnection]:
    """A pooled connection on the active generation, within the tenant's share of the pool."""
    state = request.app.state
    async with state.tenant_slots.hold(tenant), \
            state.pool.connection(timeout=state.settings.api.pool_timeout_s) as conn:
        await state.generation.use(conn)
        yield conn


async def _erase_once(request: Request, conn, envelope, kind: str, target: str, work) -> ErasureAccepted:
    """Claim the erasure of `target` (api/erasure_requests.py): a request repeated while one is
    in flight gets that one at once. The claiming request waits for its tenant's erasure slot,
    runs `work` (key destruction) and appends `envelope`; the claim is released when any of it
    fails (a 429 from the slot, a 503 from the log)."""
    tenant = envelope.tenant_id
    accepted = dict(tenant_id=tenant, erased=kind, id=target)
    pending = await erasure_requests.claim(conn, tenant, kind, target, envelope.event_id)
    if pending is not None:
        return ErasureAccepted(event_id=pending, already_requested=True, **accepted)
    try:
        async with request.app.state.erasure_gate.hold(tenant):
            if work is not None:
                await work()
            await append_or_503(request, envelope)
    except BaseException:
        await erasure_requests.release(conn, tenant, kind, target, envelope.event_id)
        raise
    forget_query_vectors(request)
    return ErasureAccepted(event_id=envelope.event_id, **accepted)


@router.delete("/v1/users/{user_id}", status_code=status.HTTP_202_ACCEPTED, response_model=ErasureAccepted)
async def erase_user(
    request: Request,
    user_id: str = Path(pattern=IDENTIFIER, max_length=200, description="The user"),
    tenant_id: Annotated[str | None, Query(max_length=200, pattern=IDENTIFIER,
                                           description="The tenant (with X-Admin-Key)")] = None,
    x_admin_key: Annotated[str | None, Security(admin_key_header)] = None,
    x_api_key: Annotated[str | None, Security(api_key_header)] = None,
) -> ErasureAccepted:
    """Forget a user: its conversations, its words in others' and all memory derived from them.
    An operator (X-Admin-Key, naming `tenant_id`) or a key bound to that very user."""
    admin = request.app.state.admin_keys.lookup(x_admin_key) if x_admin_key else None
    if admin is not None:
        if not tenant_id:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, detail="an operator names the tenant: ?tenant_id=")
        tenant, actor = tenant_id, f"admin:{admin.key_name}"
    else:
        principal = request.app.state.keys.lookup(x_api_key)
        if principal is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="missing or unknown X-Admin-Key / X-API-Key header")
        if principal.user != user_id:
            raise forbidden("only an operator key or a key bound to this user may erase it")
        bound_key_names_another(principal, request.headers.get("x-user-id"))
        if tenant_id not in (None, principal.tenant):
            raise forbidden(f"this key belongs to tenant {principal.tenant!r}")
        tenant, actor = principal.tenant, user_id
    envelope = new_event(ee.USER_ERASED, ee.UserErased(erased_user_id=user_id), tenant_id=tenant,
                         conversation_id=ee.erasure_stream(user_id), user_id=_actor(actor))

    async def shred() -> None:  # crypto-shredding first: every sealed copy of the user's messages goes unreadable
        await asyncio.to_thread(privacy.key_store(request.app.state.settings).destroy, tenant, user_id)

    async with _read_model(request, tenant) as conn:
        return await _erase_once(request, conn, envelope, "user", user_id, shred)


@router.delete("/v1/conversations/{conversation_id}", status_code=status.HTTP_202_ACCEPTED,
               response_model=ErasureAccepted)
async def erase_conversation(request: Request, principal: PrincipalDep, conn: ConnDep,
                             conversation_id: str = ConversationId,
                             x_user_id: str | None = UserIdHeader) -> ErasureAccepted:
    """Forget one conversation and all memory derived from it (its owner, or a key acting as it).
    A service key naming a user (X-User-Id) erases only a conversation that user owns (403)."""
    row = await (await conn.execute("SELECT user_id FROM conversations WHERE tenant_id = %s AND conversation_id = %s",
                                    (principal.tenant, conversation_id))).fetchone()
    user = conversation_user(principal, row[0], named_in(x_user_id), "erase conversation") if row else None
    if user is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"conversation {conversation_id!r} not found")
    if user != row[0]:
        raise forbidden(f"conversation {conversation_id!r} does not belong to user {user!r} (X-User-Id):"
                        " only its owner's conversation is erased")
    await conn.rollback()
    envelope = new_event(ee.CONVERSATION_ERASED, ee.ConversationErased(erased_conversation_id=conversation_id),
                         tenant_id=principal.tenant, conversation_id=conversation_id, user_id=user)
    return await _erase_once(request, conn, envelope, "conversation", conversation_id, None)


def _identifier(value: str) -> bool:
    return len(value) <= 200 and re.fullmatch(IDENTIFIER, value) is not None


def _actor(actor: str) -> str:
    """The envelope user id of the acting operator ("admin:<key name>") or user."""
    actor = actor.replace(" ", "-")[:200]
    return actor if _identifier(actor) else "admin"

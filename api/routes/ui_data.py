"""Read endpoints the dashboard (/ui) needs beyond the public API: who a key is, one
conversation's whole read model on one page, and `generations diff`.

Either key works here: an API key reads its own tenant (as the conversation's owner, the rules
of api/auth.py); an admin key reads any tenant, named with ?tenant= (read only: writes stay on
the public endpoints, which take API keys).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import psycopg
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Security, status
from pydantic import BaseModel

from api.auth import Principal, audit, conversation_user, may_read_tenant
from api.deps import admin_key_header, api_key_header, bound_key_names_another, get_conn
from api.routes import conversations, stats
from api.routes.admin import AdminDep
from api.routes.context import ConversationId
from api.routes.facts import FactOut, _out
from api.ui import worker_metrics as worker_metrics_view
from core.metrics import deployment_id
from api.sections.topic import TopicStatsOut, stats_out
from projections import queries
from projections import surface_queries as sq
from projections import topic_queries as tq
from projections import ui_queries as uq
from projections.diff import diff_generations
from projections.generations import GenerationError, get_generation
from schemas.envelope import IDENTIFIER
from domain.topics.decay import TopicConfig

router = APIRouter(prefix="/v1/ui", tags=["dashboard"])
TenantQuery = Query(None, pattern=IDENTIFIER, max_length=200, description="The tenant (admin key only)")


@dataclass(frozen=True)
class Reader:
    """Who reads: an API key's principal, or an admin key (principal None) and its chosen tenant."""

    principal: Principal | None
    tenant: str | None

    @property
    def admin(self) -> bool:
        return self.principal is None


def get_reader(request: Request, x_api_key: Annotated[str | None, Security(api_key_header)] = None,
               x_admin_key: Annotated[str | None, Security(admin_key_header)] = None,
               tenant: str | None = TenantQuery) -> Reader:
    state = request.app.state
    if x_admin_key is not None:
        if state.admin_keys.lookup(x_admin_key) is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="unknown X-Admin-Key header")
        return Reader(None, tenant)
    principal = state.keys.lookup(x_api_key)
    if principal is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="missing or unknown X-API-Key or X-Admin-Key header",
                            headers={"WWW-Authenticate": "ApiKey"})
    if tenant is not None and tenant != principal.tenant:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="an API key reads only its own tenant")
    bound_key_names_another(principal, request.headers.get("x-user-id"))
    return Reader(principal, principal.tenant)


ReaderDep = Annotated[Reader, Depends(get_reader)]


async def reader_conn(request: Request, reader: ReaderDep):
    """A pooled connection on the active generation, counted against the tenant read (as get_conn)."""
    if reader.tenant is None:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail="an admin key names the tenant with ?tenant=")
    if reader.admin:  # an operator reading a tenant's memory leaves a trace, as an act-as does
        audit.info("admin-read tenant=%s path=%s", reader.tenant, request.url.path)
    slot_owner = reader.principal or Principal(reader.tenant, None, "nobody", "admin")
    async for conn in get_conn(request, slot_owner):
        yield conn


class SessionOut(BaseModel):
    kind: Literal["api", "admin"]
    tenant: str | None  # None: every tenant (admin)
    user: str | None  # the user an API key is bound to
    act_as: str | None
    key_name: str
    # Search and the facts endpoints take this key: bound to a user, or a service key granted
    # act_as any_user (seed 003's owner rules are then checked per fact).
    may_act_as_user: bool


@router.get("/session", response_model=SessionOut)
def session(reader: ReaderDep) -> SessionOut:
    """What the presented key is: the dashboard shows only what it may do (the server checks every call)."""
    p = reader.principal
    if p is None:
        return SessionOut(kind="admin", tenant=None, user=None, act_as=None, key_name="admin", may_act_as_user=False)
    return SessionOut(kind="api", tenant=p.tenant, user=p.user, act_as=p.act_as, key_name=p.key_name,
                      may_act_as_user=p.user is not None or p.act_as == "any_user")


class TopicOut(TopicStatsOut):
    restored_at_seq: int | None  # set while an evicted topic's archive is restored into the context


class OverviewOut(BaseModel):
    conversation: queries.ConversationRow
    messages: list[queries.MessageRow]  # the newest `messages` ones, in seq order
    summaries: list[conversations.SummaryVersionOut]  # the chain (newest 200), oldest first, failures with their error
    chunks: list[uq.ChunkRow]
    facts: list[FactOut]  # extracted from this conversation, as its owner sees them
    active_topic_id: str | None
    topics_as_of_seq: int
    topics: list[TopicOut]


@router.get("/conversations/{conversation_id}", response_model=OverviewOut)
async def overview(request: Request, reader: ReaderDep, conn: Annotated[psycopg.AsyncConnection, Depends(reader_conn)],
                   conversation_id: str = ConversationId,
                   messages: int = Query(200, ge=1, le=1000)) -> OverviewOut:
    """One conversation's messages, summary chain, chunks, facts and topics (read only)."""
    conversation = await queries.get_conversation(conn, reader.tenant, conversation_id)
    owner = None
    if conversation is not None:
        owner = conversation.user_id if reader.admin else conversation_user(reader.principal, conversation.user_id,
                                                                             None, "dashboard")
    if conversation is None or owner is None:
        raise HTTPException(404, detail=f"conversation {conversation_id!r} not found")
    rows = await queries.list_messages(conn, reader.tenant, conversation_id, after_seq=-1, before_seq=None,
                                       limit=messages, newest=True)
    facts = [f for f in await uq.sourced_facts(conn, reader.tenant, conversation_id)
             if reader.admin or f.owner_user_id == owner or f.visibility == "shared"]
    state = await tq.get_topic_conversation(conn, reader.tenant, conversation_id)
    topic_rows = await tq.list_topics(conn, reader.tenant, conversation_id, include_evicted=True)
    config = TopicConfig.from_settings(request.app.state.settings.topics)
    now = datetime.now(UTC)
    return OverviewOut(
        conversation=conversation, messages=rows,
        summaries=[conversations.SummaryVersionOut(**row)
                   for row in await sq.summary_chain(conn, reader.tenant, conversation_id, limit=200)],
        chunks=await uq.list_chunks(conn, reader.tenant, conversation_id),
        facts=[_out(f, owner, []) for f in facts],
        active_topic_id=state.active_topic_id if state else None, topics_as_of_seq=state.last_seq if state else -1,
        topics=[TopicOut(**stats_out(t, now, config).model_dump(), restored_at_seq=t.restored_at_seq)
                for t in topic_rows],
    )


def _diff(settings, a: str, b: str) -> dict[str, Any]:
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        for name in (a, b):
            get_generation(conn, settings.kafka.topic_prefix, name)  # GenerationError if unknown
        return diff_generations(conn, a, b)


@router.get("/admin/generations/diff")
async def generations_diff(settings: AdminDep, a: str = Query(pattern=IDENTIFIER, max_length=100),
                           b: str = Query(pattern=IDENTIFIER, max_length=100)) -> dict[str, Any]:
    """`memory-agent generations diff A B` as JSON: summaries, chunks and facts that differ."""
    try:
        return await asyncio.to_thread(_diff, settings, a, b)
    except GenerationError as exc:
        raise HTTPException(404, detail=str(exc)) from None


async def admin_conn(request: Request, _: AdminDep):
    """A pooled connection on the active generation for tenant-wide admin reads."""
    async for conn in get_conn(request, Principal("*", None, "nobody", "admin")):
        yield conn


@router.get("/admin/tenants", response_model=list[uq.TenantRow])
async def tenants(conn: Annotated[psycopg.AsyncConnection, Depends(admin_conn)]) -> list[uq.TenantRow]:
    """Every tenant with conversations (the admin's tenant picker)."""
    return await uq.list_tenants(conn)


@router.get("/throughput")
async def throughput(reader: ReaderDep,
                     conn: Annotated[psycopg.AsyncConnection, Depends(reader_conn)]) -> dict[str, dict[str, int]]:
    """Rows the read model took in over the last minute, 5 minutes and hour (messages, summaries
    completed and failed, chunks, facts) for the tenant."""
    if reader.principal is not None:
        may_read_tenant(reader.principal, "throughput figures")
    return await uq.throughput(conn, reader.tenant)


@router.get("/throughput/minutes")
async def throughput_minutes(reader: ReaderDep,
                             conn: Annotated[psycopg.AsyncConnection, Depends(reader_conn)]) -> list[dict[str, Any]]:
    """The last hour minute by minute, for the stats page's charts: messages projected and the 95th
    percentile of their delay from the message's time to the read model (the projection's lag)."""
    if reader.principal is not None:
        may_read_tenant(reader.principal, "throughput figures")  # as /throughput: no user or producer key
    return await uq.throughput_per_minute(conn, reader.tenant)


def _as_service_key(reader: Reader) -> Principal:
    """The admin reads a tenant as that tenant's service key would (read-only routes only)."""
    return reader.principal or Principal(reader.tenant, None, "any_user", "admin")


@router.get("/conversations", response_model=conversations.ConversationsOut)
async def tenant_conversations(reader: ReaderDep, conn: Annotated[psycopg.AsyncConnection, Depends(reader_conn)],
                               q: str | None = Query(None, max_length=200), limit: int = Query(50, ge=1, le=500),
                               offset: int = Query(0, ge=0, le=1_000_000)) -> conversations.ConversationsOut:
    """GET /v1/conversations for either key (an admin names the tenant)."""
    return await conversations.list_conversations(_as_service_key(reader), conn, q=q, limit=limit, offset=offset)


@router.get("/stats", response_model=stats.StatsOut)
async def tenant_stats(request: Request, reader: ReaderDep,
                       conn: Annotated[psycopg.AsyncConnection, Depends(reader_conn)]) -> stats.StatsOut:
    """GET /v1/stats for either key (an admin names the tenant)."""
    return await stats.stats(request, _as_service_key(reader), conn)


@router.get("/admin/worker-metrics")
async def worker_metrics(settings: AdminDep) -> dict[str, Any]:
    """The worker's Prometheus metrics (memory_*), read from the address the worker serves them on
    (MEMORY_WORKER__METRICS_HOST/PORT); `error` says why when it does not answer."""
    worker = settings.worker
    if not worker.metrics_port:
        return {"url": None, "error": "the worker serves no metrics (MEMORY_WORKER__METRICS_PORT is 0)"}
    kafka = settings.kafka
    return await worker_metrics_view.fetch(f"http://{worker.metrics_host}:{worker.metrics_port}/metrics",
                                           deployment_id(kafka.bootstrap_servers, kafka.topic_prefix))

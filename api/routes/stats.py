"""GET /v1/stats (per tenant) and GET /v1/admin/dead-letters (operators)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from fastapi import APIRouter, HTTPException, Query, Request, status
from pydantic import BaseModel, Field

from api.auth import may_read_tenant
from api.deps import ConnDep, PrincipalDep
from api.routes.admin import AdminDep
from projections import progress as replays
from core.settings import Settings
from projections import generations as gens
from projections import surface_queries as sq
from projections.dead_letter_reader import read_recent

router = APIRouter(prefix="/v1", tags=["stats"])
admin_router = APIRouter(prefix="/v1/admin", tags=["admin"])
DEAD_LETTER_SCAN = 1000  # newest records per partition read back


class SummaryCounts(BaseModel):
    processing: int
    completed: int
    failed: int


class ProjectionOut(BaseModel):
    """Where the serving generation stands against the log (the whole deployment, every tenant)."""

    log_events: int | None = None
    projected: int | None = Field(None, description="Log events the messages projector applied")
    folded: int | None = Field(None, description="Log events the stream agents committed")
    lag_events: int | None = Field(None, description="log_events - min(projected, folded)")
    derived_events: int | None = None
    derived_lag: int | None = Field(None, description="Derived events not yet projected")
    error: str | None = Field(None, description="Set when Kafka could not be asked")


class DeadLetterCounts(BaseModel):
    tenant_recent: int | None = Field(None, description="This tenant's letters among the newest scanned")
    by_reason: dict[str, int] = Field(default_factory=dict, description="This tenant's, by reason")
    total: int | None = Field(None, description="Letters in the topic, every tenant")
    error: str | None = None


class StatsOut(BaseModel):
    tenant: str
    generation: str
    conversations: int
    messages: int
    summaries: SummaryCounts
    chunks: int
    facts: int = Field(description="Current facts (not superseded, not deleted)")
    facts_superseded: int
    facts_deleted: int
    topics: int
    topics_evicted: int
    llm: dict[str, dict[str, int]] = Field(description="Per kind (summary, extraction...): LLM calls and cache hits"
                                                       " of the serving generation (every tenant)")
    projection: ProjectionOut
    dead_letters: DeadLetterCounts


async def _projection(settings: Settings, generation: str) -> ProjectionOut:
    try:
        p = await asyncio.wait_for(replays.progress(settings, generation), settings.api.ready_timeout_s * 2)
    except Exception as exc:  # noqa: BLE001 - Kafka down: the counts still answer
        return ProjectionOut(error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return ProjectionOut(log_events=p.total, projected=p.messages_projected, folded=p.folded,
                         lag_events=max(0, p.total - min(p.messages_projected, p.folded)), derived_events=p.derived_total,
                         derived_lag=max(0, p.derived_total - p.derived_projected))


async def _dead_letters(settings: Settings, tenant: str) -> DeadLetterCounts:
    try:
        found = await asyncio.wait_for(read_recent(settings.kafka.bootstrap_servers, settings.kafka.dead_letter_topic,
                                                   limit=0, per_partition=DEAD_LETTER_SCAN, tenant=tenant),
                                       settings.api.ready_timeout_s * 5)
    except Exception as exc:  # noqa: BLE001
        return DeadLetterCounts(error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return DeadLetterCounts(tenant_recent=found.scanned, by_reason=dict(found.by_reason), total=found.total)


def _llm(settings: Settings, generation: str) -> dict[str, dict[str, int]]:
    with psycopg.connect(settings.postgres.dsn, autocommit=True, connect_timeout=5) as conn:
        return gens.cache_usage(conn, settings.kafka.topic_prefix, generation)


@router.get("/stats", response_model=StatsOut)
async def stats(request: Request, principal: PrincipalDep, conn: ConnDep) -> StatsOut:
    """Counts of this tenant's memory, the serving generation's LLM calls and cache hits, how far
    the projection lags the log, and the dead letters. A key bound to a user or a producer key
    (act_as nobody) may not read them."""
    may_read_tenant(principal, "stats")
    settings: Settings = request.app.state.settings
    generation = (await request.app.state.generation.schema(conn)).removeprefix("gen_")
    counts: dict[str, Any] = await sq.tenant_counts(conn, principal.tenant)
    await conn.rollback()
    llm, projection, letters = await asyncio.gather(
        asyncio.to_thread(_llm, settings, generation), _projection(settings, generation),
        _dead_letters(settings, principal.tenant))
    return StatsOut(tenant=principal.tenant, generation=generation, llm=llm, projection=projection,
                    dead_letters=letters, **counts)


class DeadLetterOut(BaseModel):
    partition: int
    offset: int
    timestamp_ms: int
    reason: str | None
    detail: str | None
    stage: str | None
    source: dict[str, Any] | None = Field(description="topic, partition, offset of the refused record")
    key: str | None
    original_base64: str = Field(description="The refused record's bytes (cut when original_truncated)")
    original_size: int | None
    original_sha256: str | None
    original_truncated: bool
    dead_lettered_at: str | None


class DeadLettersOut(BaseModel):
    topic: str
    total: int = Field(description="Letters in the topic")
    scanned: int = Field(description=f"The newest letters read back (at most {DEAD_LETTER_SCAN} per partition)")
    by_reason: dict[str, int] = Field(description="Over the scanned letters")
    by_stage: dict[str, int]
    letters: list[DeadLetterOut] = Field(description="Newest first")


@admin_router.get("/dead-letters", response_model=DeadLettersOut,
                  responses={503: {"description": "Kafka is unavailable"}})
async def dead_letters(settings: AdminDep, limit: int = Query(50, ge=1, le=500)) -> DeadLettersOut:
    """The newest dead letters of every tenant: reason, stage, source and the original bytes."""
    topic = settings.kafka.dead_letter_topic
    try:
        found = await asyncio.wait_for(read_recent(settings.kafka.bootstrap_servers, topic, limit=limit,
                                                   per_partition=DEAD_LETTER_SCAN), settings.api.ready_timeout_s * 5)
    except Exception as exc:  # noqa: BLE001 - Kafka unavailable
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": "1"},
                            detail=f"could not read {topic}: {type(exc).__name__}: {exc}") from None
    return DeadLettersOut(topic=topic, total=found.total, scanned=found.scanned, by_reason=dict(found.by_reason),
                          by_stage={str(k): v for k, v in found.by_stage.items()},
                          letters=[DeadLetterOut(**item) for item in found.letters])

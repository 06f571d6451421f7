"""The FastAPI application: turn-start context, history, ingest, health and metrics."""

from __future__ import annotations

from contextlib import asynccontextmanager

from typing import Annotated

from fastapi import FastAPI, HTTPException, Request, Response, Security, status
from fastapi.security import APIKeyHeader
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg_pool import AsyncConnectionPool

from api import access_log, collector, docs_offline, errors, ui
from api.auth import KeyRing
from api.deps import check_connection
from api.erasure_requests import ErasureGate
from api.generation import ActiveGeneration
from api.routes import lineage as lineage_routes
from api.routes import erasure
from core import privacy, telemetry
from api.tracing import TraceRequests
from api.log_ends import LogEnds
from api.served import ServedRecorder
from api.limits import TenantSlots, tenant_share
from api.routes import (admin, context, judge, conversations, facts, health, ingest, memories, messages, search, stats, topics,
                        ui_data)
from runtime.client import MemoryClient
from core.settings import Settings
from retrieval.service import warm_up as warm_up_retrieval
from runtime.embedding_graph import settings_following_stored
from runtime.db import connect_kwargs


metrics_bearer = APIKeyHeader(name="Authorization", scheme_name="MetricsKey", auto_error=False,
                              description="`Bearer KEY`: a metrics key (MEMORY_API__METRICS_KEYS) or an admin key")


def make_api_pool(settings: Settings) -> AsyncConnectionPool:
    """The API's pool: every statement bounded by the statement timeout, and every connection
    checked before it is handed out (the first request after a PostgreSQL restart succeeds;
    api.deps.check_connection: a statement only when the socket shows the server ended it)."""
    kwargs = connect_kwargs(settings)
    kwargs["options"] += f" -c statement_timeout={settings.api.statement_timeout_ms}"
    kwargs["application_name"] = f"memory-agent-api/{settings.generation}"  # pg_stat_activity
    return AsyncConnectionPool(
        settings.postgres.dsn, min_size=settings.postgres.pool_min_size, max_size=settings.postgres.pool_max_size,
        kwargs=kwargs, check=check_connection, reset=transactional_again, configure=utc_by_name,
        timeout=settings.api.pool_timeout_s, open=False,
    )


# PostgreSQL's other names of the zone UTC. psycopg reads a timestamptz in Python's
# `timezone.utc` on a connection whose TimeZone is "UTC", and in a `ZoneInfo` of the name on any
# other: the same instants and offsets, but each offset a ZoneInfo gives (`timestamp()`, the
# JSON's "Z") costs ~6x as much, a few per candidate row of every context ("Eleventh round" in
# docs/retrieval.md). A server in any other zone keeps it: its offsets are the API's to show.
UTC_NAMES = frozenset({"Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"})


async def utc_by_name(conn) -> None:
    """A new pooled connection whose server zone is UTC under another name calls it "UTC"
    (once a connection: one round trip when it opens, none per request)."""
    if conn.info.parameter_status("TimeZone") in UTC_NAMES:
        await conn.execute("SET TimeZone TO 'UTC'")
        await conn.commit()


async def transactional_again(conn) -> None:
    """On a connection's return to the pool: out of autocommit (the surfaced record's statement
    switches it on for one statement, retrieval.search.record_surfaced; a request cancelled inside
    it must not hand the next one an autocommit connection). No I/O on an idle connection."""
    if conn.autocommit:
        await conn.set_autocommit(False)


# psycopg parses a statement's placeholders once and keeps the result (an LRU of 128) only for
# statements of at most 4,096 bytes (`psycopg._queries.MAX_CACHED_STATEMENT_LENGTH`); the
# context's search statement is ~5,100 (retrieval/items.py) and was parsed again on every
# context, ~0.3-0.4 ms of the API's CPU ("Eleventh round" in docs/retrieval.md). The API's
# statements are a few dozen texts of its own, so a higher bound keeps the cache small.
# psycopg also skips the cache for more than 50 parameters (`MAX_CACHED_STATEMENT_PARAMS`): the
# search statement has two a searched lexeme (retrieval.prescore.unrolled_coverage_sql), past 50
# from ~12 lexemes (91 at keyword_max_terms' 32). The LRU stays at 128 parses: ~5 MB at most
# with the largest search statements (review12, docs/retrieval.md).
CACHED_STATEMENT_BYTES = 32_768
CACHED_STATEMENT_PARAMS = 1_024


def cache_long_statements() -> None:
    """Let psycopg keep the parse of statements up to CACHED_STATEMENT_BYTES and
    CACHED_STATEMENT_PARAMS parameters (once a process). psycopg's module is private: if a
    release moves it, the API starts without the larger cache (the unit test fails)."""
    try:
        from psycopg import _queries
    except ImportError:
        return
    if getattr(_queries, "MAX_CACHED_STATEMENT_LENGTH", CACHED_STATEMENT_BYTES) < CACHED_STATEMENT_BYTES:
        _queries.MAX_CACHED_STATEMENT_LENGTH = CACHED_STATEMENT_BYTES
    if getattr(_queries, "MAX_CACHED_STATEMENT_PARAMS", CACHED_STATEMENT_PARAMS) < CACHED_STATEMENT_PARAMS:
        _queries.MAX_CACHED_STATEMENT_PARAMS = CACHED_STATEMENT_PARAMS


def create_app(settings: Settings, *, warm_up: bool = False) -> FastAPI:
    """`warm_up`: load the query embedder before serving (each process of `memory-agent api`)."""
    cache_long_statements()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Documents the API embeds keep the graph of the generation's stored vectors, as the worker's.
        app.state.settings = await settings_following_stored(settings)
        app.state.keys = KeyRing.for_api(settings.api)
        app.state.admin_keys = KeyRing.for_admin(settings.api)
        app.state.metrics_keys = KeyRing.for_metrics(settings.api)
        share = tenant_share(settings.api.tenant_max_connections, settings.postgres.pool_max_size,
                             len(settings.api.tenants()))
        app.state.tenant_slots = TenantSlots(share, settings.api.tenant_queue_ms / 1000)
        app.state.erasure_gate = ErasureGate(settings.api.tenant_queue_ms / 1000)  # api/erasure_requests.py
        app.state.pool = make_api_pool(settings)
        app.state.generation = ActiveGeneration(settings)
        await app.state.pool.open(wait=False)
        # The producer connects on first ingest, so reads keep working while Kafka is down.
        app.state.client = MemoryClient(settings)
        privacy.install(settings)  # sealed messages open when the API reads the log
        app.state.served_recorder = ServedRecorder(settings)  # context.served records (docs/lineage.md)
        app.state.log_ends = LogEnds(settings)  # an unknown conversation's 404 without waiting (api/log_ends.py)
        if warm_up:
            await warm_up_retrieval(app.state)
        stop_tracing = telemetry.configure(settings, "api")  # None: off (docs/observability.md)
        collector.settle()  # what the process started with is not scanned again (api/collector.py)
        try:
            yield
        finally:
            if stop_tracing is not None:
                stop_tracing()
            await app.state.client.stop()
            await app.state.served_recorder.close()
            await app.state.log_ends.close()
            await app.state.pool.close()

    app = FastAPI(
        title="Memory Agent",
        version="0.1.0",
        summary="Turn-start conversation context from an event-sourced memory.",
        lifespan=lifespan,
        docs_url=None,  # served from the app's own assets (api/docs_offline.py)
        redoc_url=None,
    )
    for module in (conversations, context, messages, ingest, facts, topics, search, memories, stats, admin, health,
                   ui_data, ui):
        app.include_router(module.router)
    app.include_router(stats.admin_router)
    app.include_router(judge.router)  # docs/replay.md, judging
    docs_offline.install(app)

    @app.get("/metrics", tags=["health"], response_class=Response,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"},
                        401: {"description": "No scrape key: `Authorization: Bearer` a metrics or admin key"}})
    def metrics(request: Request, authorization: Annotated[str | None, Security(metrics_bearer)] = None) -> Response:
        """Prometheus metrics of this process, for a scraper presenting a metrics key
        (MEMORY_API__METRICS_KEYS) or an admin key as `Authorization: Bearer KEY`: the counters
        move with every tenant's requests, so no API key reads them (docs/security.md)."""
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or request.app.state.metrics_keys.lookup(key.strip()) is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
                                detail="/metrics needs a scrape key: Authorization: Bearer <a MEMORY_API__METRICS_KEYS"
                                       " or admin key>")
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(lineage_routes.router)  # docs/lineage.md
    app.include_router(erasure.router)  # docs/lineage.md, erasure
    errors.install(app)
    access_log.install(app.routes)  # templates, never ids or query strings (api/access_log.py)
    if telemetry.wanted(settings):  # off: not even a middleware on the request path
        app.add_middleware(TraceRequests)
    return app

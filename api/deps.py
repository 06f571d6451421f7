"""FastAPI dependencies: settings, the caller (principal), a pooled connection, the producer."""

from __future__ import annotations

import asyncio
import select
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any, Callable

import psycopg
from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import APIKeyHeader
from aiokafka.structs import RecordMetadata
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from api.auth import Principal
from runtime.client import MemoryClient
from core.settings import Settings
from schemas.envelope import Envelope, InvalidEvent

api_key_header = APIKeyHeader(name="X-API-Key", scheme_name="ApiKey", auto_error=False,
                              description="API key: selects the tenant and, if bound, the user")
admin_key_header = APIKeyHeader(name="X-Admin-Key", scheme_name="AdminKey", auto_error=False, description="operator key (/v1/admin)")


# The dependencies are `async def` although they do not wait: FastAPI runs a plain `def`
# dependency in its thread pool, a thread hand-off per dependency per request.
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_principal(request: Request, x_api_key: Annotated[str | None, Security(api_key_header)] = None) -> Principal:
    principal = request.app.state.keys.lookup(x_api_key)
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing or unknown X-API-Key header",
            headers={"WWW-Authenticate": "ApiKey"},
        )
    bound_key_names_another(principal, request.headers.get("x-user-id"))
    return principal


def bound_key_names_another(principal: Principal, named: str | None) -> None:
    """A key bound to a user naming another one (X-User-Id) is refused on every route, including
    those that take no X-User-Id: the header is honoured or refused, never ignored."""
    if principal.user is not None and named and named != principal.user:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=f"this key acts only as user {principal.user!r}")


async def get_tenant(principal: Annotated[Principal, Depends(get_principal)]) -> str:
    return principal.tenant


async def get_conn(
    request: Request, principal: Annotated[Principal, Depends(get_principal)]
) -> AsyncIterator[psycopg.AsyncConnection]:
    """A pooled connection reading the generation that is active right now, within the
    caller's tenant share of the pool (429 past it) and the pool's wait (503 past it)."""
    state = request.app.state
    async with state.tenant_slots.hold(principal.tenant):
        try:
            conn = await state.pool.getconn(timeout=state.settings.api.pool_timeout_s)
        except PoolTimeout:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail="no database connection free; retry shortly",
                                headers={"Retry-After": "1"}) from None
        try:
            async with conn:  # commit on success, roll back on error (as pool.connection() does)
                await state.generation.use(conn)
                yield conn
        finally:
            await state.pool.putconn(conn)


SIDE_WAIT_S = 0.05  # a side connection is only taken when one is idle: never queue for it


SideConnection = Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection | None]]


def side_connections(state: Any) -> SideConnection | None:
    """Extra pooled connections for one request's independent statements (the retrieval's
    table searches, retrieval.search.search_all): a connection pointing at the active
    generation when the pool has an idle one right now, else None (the caller then runs the
    statement on its own connection). Never waits for the pool, so under load (no idle
    connection) requests hold one connection each, as before, and the tenant shares still
    bound who waits; a lone request gets its searches run on several cores. None for an app
    state without a pool (in-process callers)."""
    if getattr(state, "pool", None) is None:
        return None

    @asynccontextmanager
    async def side() -> AsyncIterator[psycopg.AsyncConnection | None]:
        pool = state.pool
        if not pool.get_stats().get("pool_available"):
            yield None
            return
        try:
            conn = await pool.getconn(timeout=SIDE_WAIT_S)
        except PoolTimeout:
            yield None
            return
        try:
            async with conn:  # commit on success, roll back on error (as pool.connection() does)
                await state.generation.use(conn)
                yield conn
        finally:
            await pool.putconn(conn)

    return side


async def check_connection(conn: psycopg.AsyncConnection) -> None:
    """The API pool's check before handing a connection out, without a round trip when nothing
    is wrong: an idle connection's socket has nothing to read, so a readable one (the server
    ended the session: a restart, `pg_terminate_backend`, an idle timeout; or anything else it
    sent unasked) gets the pool's real check, a statement, and is replaced if that fails. A
    connection that dies after this check fails its request as it would after the real one."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    if select.select([conn.fileno()], [], [], 0)[0]:
        await AsyncConnectionPool.check_connection(conn)


def get_client(request: Request) -> MemoryClient:
    return request.app.state.client


async def append_or_503(request: Request, envelope: Envelope) -> RecordMetadata:
    """Append to the log within `api.produce_timeout_s`: with the broker down the caller gets a
    503 promptly (the event may still be appended later: retry with the same event_id)."""
    timeout = request.app.state.settings.api.produce_timeout_s
    try:
        return await asyncio.wait_for(request.app.state.client.append(envelope), timeout)
    except InvalidEvent as exc:  # the caller's input (a NUL in a text, a size): refused, nothing appended
        code = 413 if exc.reason in ("oversized", "metadata_too_large") else 422
        raise HTTPException(code, detail={"reason": exc.reason, "message": exc.detail}) from None
    except TimeoutError:
        detail = f"the log did not acknowledge within {timeout:g} s; retry with the same event_id"
    except Exception as exc:  # noqa: BLE001 - Kafka unavailable
        detail = f"could not append to the log: {type(exc).__name__}: {exc}"
    raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=detail, headers={"Retry-After": "1"})


SettingsDep = Annotated[Settings, Depends(get_settings)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
ConnDep = Annotated[psycopg.AsyncConnection, Depends(get_conn)]
TenantDep = Annotated[str, Depends(get_tenant)]
ClientDep = Annotated[MemoryClient, Depends(get_client)]

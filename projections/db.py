"""PostgreSQL connections scoped to one generation's schema."""

from __future__ import annotations

import psycopg
from psycopg_pool import AsyncConnectionPool

from memory_agent.settings import Settings


def connect_kwargs(settings: Settings) -> dict:
    """Every connection resolves unqualified names in this generation's schema first."""
    return {"options": f"-c search_path={settings.pg_schema},public", "autocommit": False}


async def connect(settings: Settings) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(settings.postgres.dsn, **connect_kwargs(settings))


def make_pool(settings: Settings, *, schema: str | None = None) -> AsyncConnectionPool:
    """An unopened pool; call `await pool.open()` (or use `async with`)."""
    kwargs = connect_kwargs(settings)
    if schema is not None:
        kwargs["options"] = f"-c search_path={schema},public"
    return AsyncConnectionPool(
        settings.postgres.dsn,
        min_size=settings.postgres.pool_min_size,
        max_size=settings.postgres.pool_max_size,
        kwargs=kwargs,
        open=False,
    )

"""PostgreSQL connections scoped to one generation's schema."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import psycopg
from psycopg_pool import AsyncConnectionPool

from core.settings import Settings


def connect_kwargs(settings: Settings) -> dict:
    """Every connection resolves unqualified names in this generation's schema first."""
    return {"options": f"-c search_path={settings.pg_schema},public", "autocommit": False}


async def copy_insert(cur: psycopg.AsyncCursor, table: str, columns: str, rows: Iterable[Sequence],
                      returning: str = "") -> None:
    """Insert many rows: COPY into a scratch table (emptied at commit; call inside a
    transaction), then one `INSERT … ON CONFLICT DO NOTHING [RETURNING …]` into `table`.
    Per row COPY costs a fraction of the Python time of statement parameters."""
    scratch = f"{table}_incoming"
    await cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {scratch} ON COMMIT DELETE ROWS"
                      f" AS SELECT {columns} FROM {table} WITH NO DATA")
    async with cur.copy(f"COPY {scratch} ({columns}) FROM STDIN") as copy:
        for row in rows:
            await copy.write_row(row)
    await cur.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {scratch} ON CONFLICT DO NOTHING"
                      + (f" RETURNING {returning}" if returning else ""))


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


async def open_pool(settings: Settings) -> AsyncConnectionPool:
    """The generation's pool, opened."""
    pool = make_pool(settings)
    await pool.open()
    return pool

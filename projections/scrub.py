"""Erasure on disk (docs/security.md, "Erasure on disk"): the tables an applied erasure deleted
rows from are rewritten and the write-ahead log written before is retired, so that no file of
PostgreSQL keeps an erased row's bytes after the bound.

A DELETE only marks rows dead; VACUUM makes their space reusable but leaves their bytes in the
page (and in TOAST and index pages) until something overwrites them, and the WAL holds the rows
as they were inserted (and whole pages after each checkpoint). So, per pending table of
`erasure_scrubs` (migration 0025, written by the erasure in its transaction):

1. `VACUUM (FULL, ANALYZE)` the table: a new file with the live rows only, TOAST and indexes
   rebuilt; the old files are truncated at commit and unlinked at the next checkpoint; its
   statistics sampled again from the live rows (a text column's histogram holds sample values).
   Then `pg_catalog.pg_statistic` itself is rewritten (its old rows are dead, not gone). It holds ACCESS
   EXCLUSIVE for its duration (reads and writes of that table wait: measured in docs/security.md);
   a lock that is not granted within LOCK_TIMEOUT_MS is given up (a queued ACCESS EXCLUSIVE
   request would block every new reader behind it) and tried again at the next round.
2. Once per round: `pg_switch_wal()` then `CHECKPOINT`: the checkpoint's redo point is in a new
   segment, so every older segment is deleted (with `wal_recycle=off`, no archive, no slot,
   `wal_keep_size=0`: infra/postgres.py).
3. The rows are stamped `scrubbed_at`; a row an erasure added meanwhile waits for the next round.

One scrub at a time per database (an advisory lock); every process that runs the projectors
runs the loop (`run_scrubs`), every `privacy.scrub_interval_s` (MEMORY_PRIVACY__SCRUB_INTERVAL_S,
default 10 s).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import psycopg
from psycopg import sql

from core.settings import Settings
from runtime.db import connect_kwargs

log = logging.getLogger(__name__)

LOCK_TIMEOUT_MS = 200
_ADVISORY_KEY = 0x6D656D5F73637262  # 'mem_scrb': one scrub per database at a time
# Labels of `erase`'s counts that name a table outside the generation's schema.
PUBLIC_TABLES = {"llm_cache": "public.llm_cache", "embedding_cache": "public.embedding_cache",
                 "data_keys": "public.data_keys"}


async def request(conn: psycopg.AsyncConnection, erasure_id: str, tables: Sequence[str]) -> None:
    """Record, in the erasure's transaction, the tables to rewrite: generation tables by name
    (resolved on the connection's search path), public ones by their `PUBLIC_TABLES` label."""
    names = sorted({PUBLIC_TABLES.get(t, t) for t in tables})
    await conn.execute(
        "INSERT INTO erasure_scrubs (erasure_event_id, table_name)"
        " SELECT %s, format('%%I.%%I', n.nspname, c.relname) FROM unnest(%s::text[]) t"
        " JOIN pg_class c ON c.oid = to_regclass(t) JOIN pg_namespace n ON n.oid = c.relnamespace"
        " ON CONFLICT DO NOTHING", (erasure_id, names))


async def scrub_once(conn: psycopg.AsyncConnection) -> dict[str, float]:
    """One round on an autocommit connection (search path: the generation's schema): {table:
    seconds} of the tables rewritten; {} when none was pending or another process scrubs."""
    [(locked,)] = await (await conn.execute("SELECT pg_try_advisory_lock(%s)", (_ADVISORY_KEY,))).fetchall()
    if not locked:
        return {}
    try:
        pending = await (await conn.execute(
            "SELECT erasure_event_id, table_name FROM erasure_scrubs WHERE scrubbed_at IS NULL")).fetchall()
        done: dict[str, float] = {}
        for table in sorted({t for _, t in pending}):
            seconds = await _rewrite(conn, table)
            if seconds is not None:
                done[table] = seconds
        if done:
            await _rewrite(conn, "pg_catalog.pg_statistic", analyze=False)
            await _retire_wal(conn)
            rows = [(e, t) for e, t in pending if t in done]
            await conn.execute(
                "UPDATE erasure_scrubs s SET scrubbed_at = clock_timestamp() FROM unnest(%s::text[], %s::text[])"
                " AS d(e, t) WHERE s.erasure_event_id = d.e AND s.table_name = d.t AND s.scrubbed_at IS NULL",
                ([e for e, _ in rows], [t for _, t in rows]))
            log.info("erasure scrub: rewrote %s", ", ".join(f"{t} ({s:.2f}s)" for t, s in done.items()))
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (_ADVISORY_KEY,))


async def _rewrite(conn: psycopg.AsyncConnection, table: str, analyze: bool = True) -> float | None:
    """VACUUM FULL one table; seconds taken, or None when its lock was not granted in time
    (tried again next round). A table dropped since (its generation) counts as done, and so does
    one the role may not rewrite (VACUUM would only warn and skip it: logged here; docs/security.md
    says which role the scrub needs)."""
    found = await (await conn.execute(
        "SELECT n.nspname, c.relname, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        " OR pg_has_role(current_user, c.relowner, 'MEMBER') FROM pg_class c JOIN pg_namespace n"
        " ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)", (table,))).fetchone()
    if found is None:
        return 0.0
    schema, name, allowed = found
    if not allowed:
        log.warning("erasure scrub: the role may not rewrite %s; its erased rows stay on its pages", table)
        return 0.0
    loop = asyncio.get_running_loop()
    begin = loop.time()
    try:
        await conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
        await conn.execute(sql.SQL("VACUUM (FULL, ANALYZE) {}" if analyze else "VACUUM (FULL) {}").format(
            sql.Identifier(schema, name)))
    except psycopg.errors.LockNotAvailable:
        log.info("erasure scrub: %s is busy; again in the next round", table)
        return None
    except psycopg.errors.UndefinedTable:
        return 0.0
    finally:
        await conn.execute("SET lock_timeout = 0")
    return loop.time() - begin


async def _retire_wal(conn: psycopg.AsyncConnection) -> None:
    """A new WAL segment, then a checkpoint whose redo point is in it: the older segments go.
    Without the privileges (superuser, or pg_checkpoint and EXECUTE on pg_switch_wal) the WAL
    keeps the rows until the server's own checkpoints pass them (docs/security.md)."""
    try:
        await conn.execute("SELECT pg_switch_wal()")
        await conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege as exc:
        log.warning("erasure scrub: cannot retire the WAL (%s); erased rows stay in it until the server's"
                    " checkpoints and segment switches pass them", exc)


async def run_scrubs(settings: Settings) -> None:
    """Scrub every `privacy.scrub_interval_s` until cancelled; a lost connection is opened again
    next round."""
    interval_s = settings.privacy.scrub_interval_s
    conn: psycopg.AsyncConnection | None = None
    try:
        while True:
            try:
                if conn is None or conn.closed:
                    conn = await psycopg.AsyncConnection.connect(settings.postgres.dsn,
                                                                 **{**connect_kwargs(settings), "autocommit": True})
                await scrub_once(conn)
            except psycopg.errors.UndefinedTable:
                pass  # not migrated yet
            except psycopg.OperationalError as exc:
                log.warning("erasure scrub: PostgreSQL unavailable (%s); again in %.0fs", exc, interval_s)
                conn = None
            await asyncio.sleep(interval_s)
    finally:
        if conn is not None and not conn.closed:
            await conn.close()

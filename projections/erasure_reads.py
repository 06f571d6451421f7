"""The erasure check's and the re-derive sender's reads of the read model (the ports:
domain/erasure_reads.py), in PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from core.settings import Settings
from domain.erasure import AppliedErasure, LogPosition
from domain.erasure_reads import PendingRederive, ReadsUnavailable
from runtime.db import connect_kwargs

_COUNT = "SELECT count(*) FROM erasures"
_ALL = ("SELECT count(*) OVER (), event_id, tenant_id, erased_user_id, conversation_ids, rederive, log_partition,"
        " log_offset, (extract(epoch FROM COALESCE(logged_at, requested_at)) * 1000)::bigint FROM erasures")
_OFFSETS = "SELECT partition, next_offset FROM projector_offsets WHERE projector = %s AND topic = %s"
# Per mixed conversation, the newest erasure that asks for its topics to be derived again.
_REDERIVED = """
SELECT DISTINCT ON (tenant_id, conversation_id) tenant_id, conversation_id, erasure_event_id
  FROM erasure_rederive ORDER BY tenant_id, conversation_id, created_at DESC
"""

T = TypeVar("T")


def _erasure(row) -> AppliedErasure:
    _, event_id, tenant, user, conversation_ids, rederive, partition, offset, timestamp_ms = row
    return AppliedErasure(event_id, tenant, user, frozenset(conversation_ids) - frozenset(rederive or {}),
                          LogPosition(-1 if partition is None else partition, offset or 0, timestamp_ms))


Connect = Callable[[], Awaitable[psycopg.AsyncConnection]]


def connector(settings: Settings) -> Connect:
    """A connection of the check's own on the generation's schema, autocommit (no transaction
    stays open between probes: each probe sees every erasure committed before it was sent)."""
    async def connect() -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(settings.postgres.dsn,
                                                     **{**connect_kwargs(settings), "autocommit": True})
    return connect


class PostgresErasureReads:
    """On a connection of its own, opened on first use and again after an operational error
    (which is raised as `ReadsUnavailable`, the connection dropped)."""

    def __init__(self, settings: Settings) -> None:
        self.connect: Connect = connector(settings)
        self._conn: psycopg.AsyncConnection | None = None

    async def _read(self, read: Callable[[psycopg.AsyncConnection], Awaitable[T]]) -> T:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = await self.connect()
            return await read(self._conn)
        except psycopg.OperationalError as exc:
            await self._drop()
            raise ReadsUnavailable(str(exc)) from exc

    async def count(self) -> int:
        async def read(conn):
            return (await (await conn.execute(_COUNT, prepare=True)).fetchone())[0]
        return await self._read(read)

    async def applied(self) -> tuple[int, list[AppliedErasure]]:
        async def read(conn):
            return await (await conn.execute(_ALL)).fetchall()
        rows = await self._read(read)
        return (rows[0][0] if rows else 0), [_erasure(row) for row in rows]

    async def projector_offsets(self, projector: str, topic: str) -> dict[int, int]:
        async def read(conn):
            return dict(await (await conn.execute(_OFFSETS, (projector, topic))).fetchall())
        return await self._read(read)

    async def rederive_requests(self) -> dict[tuple[str, str], str]:
        """{(tenant, conversation): the newest erasure asking to derive its topics again} (the batch replay's)."""
        async def read(conn):
            return await (await conn.execute(_REDERIVED)).fetchall()
        return {(t, c): e for t, c, e in await self._read(read)}

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - a broken connection; a new one is opened
                pass


_PENDING = """
SELECT erasure_event_id, tenant_id, conversation_id, erased_seqs, base_memory_id, base_end_seq, chunk_ranges,
       attempts, sent_at
  FROM erasure_rederive WHERE done_at IS NULL ORDER BY created_at LIMIT 50 FOR UPDATE SKIP LOCKED
"""
_RECORDED = ("SELECT message_range_start, message_range_end FROM conversation_chunks WHERE tenant_id = %s"
             " AND conversation_id = %s")
_WITH_MESSAGES = ("SELECT 1 FROM messages WHERE tenant_id = %s AND conversation_id = %s AND seq >= %s AND seq < %s"
                  " LIMIT 1")
_SENT = ("UPDATE erasure_rederive SET attempts = attempts + 1, sent_at = now()"
         " WHERE erasure_event_id = %s AND conversation_id = %s")
_DONE = "UPDATE erasure_rederive SET done_at = now(), outcome = %s WHERE erasure_event_id = %s AND conversation_id = %s"


class _RederiveSession:
    def __init__(self, conn: psycopg.AsyncConnection) -> None:
        self.conn = conn

    async def pending(self) -> list[PendingRederive]:
        rows = await (await self.conn.execute(_PENDING)).fetchall()
        return [PendingRederive(erasure, tenant, conversation, list(erased), base_id, base_end,
                                [tuple(r) for r in ranges], attempts, sent_at)
                for erasure, tenant, conversation, erased, base_id, base_end, ranges, attempts, sent_at in rows]

    async def recorded_ranges(self, tenant_id: str, conversation_id: str) -> set[tuple[int, int]]:
        return {tuple(r) for r in await (await self.conn.execute(_RECORDED, (tenant_id, conversation_id))).fetchall()}

    async def with_messages(self, tenant_id: str, conversation_id: str,
                            ranges: list[tuple[int, int]]) -> set[tuple[int, int]]:
        return {r for r in ranges if await (await self.conn.execute(
            _WITH_MESSAGES, (tenant_id, conversation_id, r[0], r[1]))).fetchone()}

    async def now(self) -> datetime:
        return (await (await self.conn.execute("SELECT now()")).fetchone())[0]

    async def sent(self, erasure_event_id: str, conversation_id: str) -> None:
        await self.conn.execute(_SENT, (erasure_event_id, conversation_id))

    async def done(self, erasure_event_id: str, conversation_id: str, outcome: str) -> None:
        await self.conn.execute(_DONE, (outcome, erasure_event_id, conversation_id))


class PostgresRederiveReads:
    """On the generation's pool: one connection and one transaction per session."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[_RederiveSession]:
        async with self.pool.connection() as conn, conn.transaction():
            yield _RederiveSession(conn)

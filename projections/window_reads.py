"""The window summary stage's reads of the read model (the port: domain/window/reads.py), in PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from domain.window.reads import MessageRow, SettledRow

_SETTLED = (
    "SELECT status, attempt, memory_text, generation_time_ms, prompt_version, model, source_event_ids, error"
    " FROM memory WHERE tenant_id = %s AND conversation_id = %s AND memory_id = %s"
)
_BASE = "SELECT status, memory_text FROM memory WHERE tenant_id = %s AND conversation_id = %s AND memory_id = %s"
_MESSAGES = (
    "SELECT seq, event_id, role, content, occurred_at FROM messages WHERE tenant_id = %s"
    " AND conversation_id = %s AND seq BETWEEN %s AND %s ORDER BY seq"
)
# Seqs an erasure removed: recorded for re-derivation, or never projected (written before their erasure).
_ERASED = (
    "SELECT count(*) FROM (SELECT s FROM erasure_rederive, unnest(erased_seqs) s WHERE tenant_id = %(t)s"
    " AND conversation_id = %(c)s AND s BETWEEN %(a)s AND %(b)s UNION SELECT seq FROM erased_messages"
    " WHERE tenant_id = %(t)s AND conversation_id = %(c)s AND seq BETWEEN %(a)s AND %(b)s) gaps"
)


class _Session:
    def __init__(self, conn: psycopg.AsyncConnection) -> None:
        self.conn = conn

    async def settled(self, tenant_id: str, conversation_id: str, memory_id: int) -> SettledRow | None:
        row = await (await self.conn.execute(_SETTLED, (tenant_id, conversation_id, memory_id))).fetchone()
        return None if row is None else SettledRow(*row)

    async def base(self, tenant_id: str, conversation_id: str, memory_id: int) -> tuple[str, str | None] | None:
        row = await (await self.conn.execute(_BASE, (tenant_id, conversation_id, memory_id))).fetchone()
        return None if row is None else (row[0], row[1])

    async def messages(self, tenant_id: str, conversation_id: str, first_seq: int, last_seq: int) -> list[MessageRow]:
        cur = await self.conn.execute(_MESSAGES, (tenant_id, conversation_id, first_seq, last_seq))
        return [tuple(row) for row in await cur.fetchall()]

    async def erased_seqs(self, tenant_id: str, conversation_id: str, first_seq: int, last_seq: int) -> int:
        cur = await self.conn.execute(_ERASED, {"t": tenant_id, "c": conversation_id, "a": first_seq, "b": last_seq})
        return (await cur.fetchone())[0]


class PostgresWindowReads:
    """On the generation's pool: one connection checkout per session, its reads in autocommit.

    Each read is one statement, and at the pool's READ COMMITTED level a statement sees what was
    committed when it started whether or not a transaction surrounds it: a transaction added a
    BEGIN and a COMMIT round trip to every summary's reads and changed nothing they return."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[_Session]:
        async with self.pool.connection() as conn:
            await conn.set_autocommit(True)
            try:
                yield _Session(conn)
            finally:  # the pool's connections are transactional for their other users
                if conn.info.transaction_status == TransactionStatus.IDLE:
                    await conn.set_autocommit(False)
                elif not conn.closed:  # cut off mid-statement: not lent out again in autocommit
                    await conn.close()

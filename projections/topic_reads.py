"""The topic compaction and backlog stages' reads of the read model (the port: domain/topics/reads.py), in PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

import psycopg
from psycopg_pool import AsyncConnectionPool

from domain.topics.reads import RecallRow

_COMPACTION = (
    "SELECT summary_upto_seq, summary, summary_model, summary_prompt_version FROM topics"
    " WHERE tenant_id = %s AND conversation_id = %s AND topic_id = %s"
)
_MESSAGES = (
    "SELECT seq, role, content FROM messages WHERE tenant_id = %s AND conversation_id = %s"
    " AND seq = ANY(%s) ORDER BY seq"
)


class PostgresTopicReads:
    """On the generation's pool: one connection checkout (one transaction) per read."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def compaction(self, tenant_id: str, conversation_id: str,
                         topic_id: str) -> tuple[int, str | None, str | None, str | None] | None:
        async with self.pool.connection() as conn:
            row = await (await conn.execute(_COMPACTION, (tenant_id, conversation_id, topic_id))).fetchone()
        return None if row is None else tuple(row)

    async def messages(self, tenant_id: str, conversation_id: str, seqs: Sequence[int]) -> list[tuple[int, str, str]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_MESSAGES, (tenant_id, conversation_id, list(seqs)))
            return [tuple(row) for row in await cur.fetchall()]


_RECALL_COLUMNS = "SELECT seq, role, content, occurred_at, user_id, subject_id, metadata FROM messages"
_RECALL_RANGE = (_RECALL_COLUMNS + " WHERE tenant_id = %s AND conversation_id = %s AND seq >= %s AND seq <= %s"
                 " ORDER BY seq LIMIT %s")
_NEWEST = ("SELECT GREATEST((SELECT max(seq) FROM messages WHERE tenant_id = %(t)s AND conversation_id = %(c)s),"
           " (SELECT max(seq) FROM erased_messages WHERE tenant_id = %(t)s AND conversation_id = %(c)s))")


class _BacklogSession:
    def __init__(self, conn: psycopg.AsyncConnection) -> None:
        self.conn = conn

    async def rows(self, tenant_id: str, conversation_id: str, from_seq: int, upto_seq: int,
                   limit: int) -> list[RecallRow]:
        cur = await self.conn.execute(_RECALL_RANGE, (tenant_id, conversation_id, from_seq, upto_seq, limit))
        return [tuple(row) for row in await cur.fetchall()]

    async def gap_rows(self, tenant_id: str, conversation_id: str, ranges: Sequence[tuple[int, int]],
                       limit: int) -> list[RecallRow]:
        within = " OR ".join(["seq BETWEEN %s AND %s"] * len(ranges))
        cur = await self.conn.execute(
            _RECALL_COLUMNS + f" WHERE tenant_id = %s AND conversation_id = %s AND ({within}) ORDER BY seq LIMIT %s",
            (tenant_id, conversation_id, *[s for r in ranges for s in r], limit))
        return [tuple(row) for row in await cur.fetchall()]

    async def newest(self, tenant_id: str, conversation_id: str) -> int | None:
        return (await (await self.conn.execute(_NEWEST, {"t": tenant_id, "c": conversation_id})).fetchone())[0]


class PostgresBacklogReads:
    """The topic backlog stage's reads (the port: domain/topics/reads.py `BacklogReads`) on the
    generation's pool: one connection checkout per session (one poll)."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[_BacklogSession]:
        async with self.pool.connection() as conn:
            yield _BacklogSession(conn)

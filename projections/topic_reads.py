"""The topic compaction stage's reads of the read model (the port: domain/topics/reads.py), in PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg_pool import AsyncConnectionPool

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

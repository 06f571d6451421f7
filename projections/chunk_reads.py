"""The chunk stage's reads of the read model (the port: domain/facts/reads.py), in PostgreSQL,
and the batch replay's reads of a whole wave of ranges at once (memory_agent/batch_replay/facts.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from psycopg_pool import AsyncConnectionPool

from domain.facts.reads import ConversationRow, FactRow, MessageRow, RangeRows

# The owner's current facts of the subject ranked by shared words with the chunk (an OR query),
# from before the chunk's newest message: a replay never shows an older chunk "future" facts.
_RELATED = """
SELECT fact_id, content, category FROM facts
 WHERE tenant_id = %(tenant)s AND owner_user_id = %(owner)s AND subject_id IS NOT DISTINCT FROM %(subject)s
   AND valid_to IS NULL AND deleted_at IS NULL AND valid_from <= %(before)s
   AND content_tsv @@ to_tsquery('english', %(query)s)
 ORDER BY ts_rank(content_tsv, to_tsquery('english', %(query)s)) DESC, updated_at DESC, fact_id
 LIMIT %(limit)s
"""
_RECORDED = ("SELECT 1 FROM conversation_chunks WHERE tenant_id = %s AND conversation_id = %s"
             " AND message_range_start = %s AND message_range_end = %s")
_CONVERSATION = "SELECT user_id, subject_id, last_seq FROM conversations WHERE tenant_id = %s AND conversation_id = %s"
_MESSAGES = ("SELECT seq, event_id, role, content, occurred_at FROM messages WHERE tenant_id = %s"
             " AND conversation_id = %s AND seq >= %s AND seq < %s ORDER BY seq")
_ERASED = ("SELECT count(*) FROM erased_messages WHERE tenant_id = %s AND conversation_id = %s"
           " AND seq >= %s AND seq < %s")

# A wave's ranges read from the projection in two queries (the stage reads one range in two).
_WAVE_CONVERSATIONS = """
SELECT c.tenant_id, c.conversation_id, c.user_id, c.subject_id, c.last_seq
  FROM conversations c JOIN unnest(%(tenants)s::text[], %(conversations)s::text[]) AS w(t, c2)
    ON c.tenant_id = w.t AND c.conversation_id = w.c2
"""
_WAVE_MESSAGES = """
SELECT w.i, m.seq, m.event_id, m.role, m.content, m.occurred_at
  FROM unnest(%(tenants)s::text[], %(conversations)s::text[], %(starts)s::int[], %(ends)s::int[])
       WITH ORDINALITY AS w(t, c, s, e, i)
  JOIN messages m ON m.tenant_id = w.t AND m.conversation_id = w.c AND m.seq >= w.s AND m.seq < w.e
 ORDER BY w.i, m.seq
"""
# `_RELATED` for every range of a wave at once: the same filter, ranking and limit per range,
# numbered in the wave's order.
_WAVE_RELATED = """
SELECT w.i, f.fact_id, f.content, f.category
  FROM unnest(%(tenants)s::text[], %(owners)s::text[], %(subjects)s::text[], %(queries)s::text[],
              %(befores)s::timestamptz[]) WITH ORDINALITY AS w(t, o, s, q, b, i)
 CROSS JOIN LATERAL (
       SELECT fact_id, content, category,
              row_number() OVER (ORDER BY ts_rank(content_tsv, to_tsquery('english', w.q)) DESC, updated_at DESC,
                                 fact_id) AS n
         FROM facts
        WHERE tenant_id = w.t AND owner_user_id = w.o AND subject_id IS NOT DISTINCT FROM w.s
          AND valid_to IS NULL AND deleted_at IS NULL AND valid_from <= w.b
          AND content_tsv @@ to_tsquery('english', w.q)
        ORDER BY ts_rank(content_tsv, to_tsquery('english', w.q)) DESC, updated_at DESC, fact_id
        LIMIT %(limit)s) AS f
 ORDER BY w.i, f.n
"""

# (tenant_id, conversation_id, start, end exclusive) of a requested range.
RangeKey = tuple[str, str, int, int]
# (tenant_id, owner_user_id, subject_id, query, before) of a range's related-facts question.
RelatedAsk = tuple[str, str, str | None, str, datetime]


class PostgresChunkReads:
    """On the generation's pool: one connection checkout (one transaction) per read."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def recorded(self, tenant_id: str, conversation_id: str, start: int, end: int) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_RECORDED, (tenant_id, conversation_id, start, end))
            return await cur.fetchone() is not None

    async def range_rows(self, tenant_id: str, conversation_id: str, start: int, end: int) -> RangeRows:
        async with self.pool.connection() as conn:
            conversation = await (await conn.execute(_CONVERSATION, (tenant_id, conversation_id))).fetchone()
            cur = await conn.execute(_MESSAGES, (tenant_id, conversation_id, start, end))
            rows = [tuple(row) for row in await cur.fetchall()]
            erased = 0
            if len(rows) < end - start:  # seqs never projected: written before their erasure
                cur = await conn.execute(_ERASED, (tenant_id, conversation_id, start, end))
                erased = (await cur.fetchone())[0]
        return RangeRows(None if conversation is None else tuple(conversation), rows, erased)

    async def related(self, tenant_id: str, owner_user_id: str, subject_id: str | None, query: str, limit: int,
                      before: datetime) -> list[FactRow]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_RELATED, {"tenant": tenant_id, "owner": owner_user_id, "subject": subject_id,
                                                "query": query, "limit": limit, "before": before})
            return [tuple(row) for row in await cur.fetchall()]

    async def wave_rows(self, keys: Sequence[RangeKey]) -> tuple[dict[tuple[str, str], ConversationRow],
                                                                 dict[int, list[MessageRow]]]:
        """For a wave of ranges: the conversations by (tenant, conversation) and the messages by
        the range's index in `keys`, in two queries."""
        params = {"tenants": [k[0] for k in keys], "conversations": [k[1] for k in keys],
                  "starts": [k[2] for k in keys], "ends": [k[3] for k in keys]}
        async with self.pool.connection() as conn:
            cur = await conn.execute(_WAVE_CONVERSATIONS, params)
            conversations = {(t, c): (user, subject, last) for t, c, user, subject, last in await cur.fetchall()}
            cur = await conn.execute(_WAVE_MESSAGES, params)
            rows: dict[int, list[MessageRow]] = {}
            for i, *row in await cur.fetchall():
                rows.setdefault(i - 1, []).append(tuple(row))
        return conversations, rows

    async def wave_related(self, asks: Sequence[RelatedAsk], limit: int) -> dict[int, list[FactRow]]:
        """`related` for every ask at once, by the ask's index."""
        params = {"tenants": [a[0] for a in asks], "owners": [a[1] for a in asks], "subjects": [a[2] for a in asks],
                  "queries": [a[3] for a in asks], "befores": [a[4] for a in asks], "limit": limit}
        async with self.pool.connection() as conn:
            cur = await conn.execute(_WAVE_RELATED, params)
            found: dict[int, list[FactRow]] = {}
            for i, fact_id, content, category in await cur.fetchall():
                found.setdefault(i - 1, []).append((fact_id, content, category))
        return found

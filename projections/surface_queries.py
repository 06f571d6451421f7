"""Read queries for the operator surfaces: conversations list, summary chains, per-tenant counts
and a user's memory export (every query scoped by tenant)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row, dict_row

from projections.queries import ConversationRow


@dataclass(frozen=True)
class ConversationListRow(ConversationRow):
    first_seen_at: datetime
    last_message_at: datetime | None
    summaries: int
    summary_end_seq: int | None  # newest completed summary covers up to this seq
    chunks: int
    facts: int
    topics: int

    @property
    def summary_lag(self) -> int:
        """Messages after the newest completed summary (all of them when there is none)."""
        return self.last_seq - (self.summary_end_seq if self.summary_end_seq is not None else -1)


_CONVERSATIONS = """
SELECT c.tenant_id, c.conversation_id, c.user_id, c.subject_id, c.last_seq, c.message_count, c.gap_count,
       c.first_seen_at,
       (SELECT m.occurred_at FROM messages m WHERE m.tenant_id = c.tenant_id
           AND m.conversation_id = c.conversation_id AND m.seq = c.last_seq) AS last_message_at,
       (SELECT count(*) FROM memory s WHERE s.tenant_id = c.tenant_id
           AND s.conversation_id = c.conversation_id)::int AS summaries,
       (SELECT max(s.end_sequence) FROM memory s WHERE s.tenant_id = c.tenant_id
           AND s.conversation_id = c.conversation_id AND s.status = 'completed') AS summary_end_seq,
       (SELECT count(*) FROM conversation_chunks k WHERE k.tenant_id = c.tenant_id
           AND k.conversation_id = c.conversation_id)::int AS chunks,
       (SELECT count(*) FROM facts f WHERE f.tenant_id = c.tenant_id
           AND f.source_conversation_id = c.conversation_id AND f.deleted_at IS NULL
           AND f.valid_to IS NULL)::int AS facts,
       (SELECT count(*) FROM topics t WHERE t.tenant_id = c.tenant_id
           AND t.conversation_id = c.conversation_id)::int AS topics
  FROM conversations c
 WHERE c.tenant_id = %(tenant)s AND (%(user)s::text IS NULL OR c.user_id = %(user)s)
   AND (%(q)s::text IS NULL OR c.conversation_id ILIKE %(pattern)s OR c.user_id ILIKE %(pattern)s
        OR c.subject_id ILIKE %(pattern)s)
 ORDER BY c.updated_at DESC, c.conversation_id
 LIMIT %(limit)s OFFSET %(offset)s
"""


def _like(q: str) -> str:
    return "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def list_conversations(conn: psycopg.AsyncConnection, tenant_id: str, *, q: str | None, user_id: str | None,
                             limit: int, offset: int) -> tuple[list[ConversationListRow], int]:
    """A page of the tenant's conversations (most recently updated first) and the total that match."""
    params = {"tenant": tenant_id, "user": user_id, "q": q or None, "pattern": _like(q or ""),
              "limit": limit, "offset": offset}
    async with conn.cursor(row_factory=class_row(ConversationListRow)) as cur:
        await cur.execute(_CONVERSATIONS, params)
        rows = await cur.fetchall()
    cur = await conn.execute(
        "SELECT count(*) FROM conversations c WHERE c.tenant_id = %(tenant)s"
        " AND (%(user)s::text IS NULL OR c.user_id = %(user)s) AND (%(q)s::text IS NULL"
        " OR c.conversation_id ILIKE %(pattern)s OR c.user_id ILIKE %(pattern)s OR c.subject_id ILIKE %(pattern)s)",
        params)
    return rows, (await cur.fetchone())[0]


async def summary_chain(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str, *, limit: int
                        ) -> list[dict[str, Any]]:
    """Every summary row of the conversation, oldest first: the version chain with failures
    (named as the API shows them: start_seq, end_seq inclusive, text)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT * FROM (SELECT memory_id, base_memory_id, start_sequence AS start_seq, end_sequence AS end_seq,"
            " status, attempt, error, memory_text AS text, prompt_version, model, generation_time_ms,"
            " source_event_ids, created_at, updated_at, completed_at FROM memory"
            " WHERE tenant_id = %s AND conversation_id = %s"
            " ORDER BY memory_id DESC LIMIT %s) newest ORDER BY memory_id",
            (tenant_id, conversation_id, limit))
        return await cur.fetchall()


_COUNTS = """
SELECT (SELECT count(*) FROM conversations WHERE tenant_id = %(t)s) AS conversations,
       (SELECT count(*) FROM messages WHERE tenant_id = %(t)s) AS messages,
       (SELECT count(*) FROM conversation_chunks WHERE tenant_id = %(t)s) AS chunks,
       (SELECT count(*) FROM facts WHERE tenant_id = %(t)s AND deleted_at IS NULL AND valid_to IS NULL) AS facts,
       (SELECT count(*) FROM facts WHERE tenant_id = %(t)s AND valid_to IS NOT NULL) AS facts_superseded,
       (SELECT count(*) FROM facts WHERE tenant_id = %(t)s AND deleted_at IS NOT NULL) AS facts_deleted,
       (SELECT count(*) FROM topics WHERE tenant_id = %(t)s) AS topics,
       (SELECT count(*) FROM topics WHERE tenant_id = %(t)s AND evicted_at IS NOT NULL) AS topics_evicted
"""


async def tenant_counts(conn: psycopg.AsyncConnection, tenant_id: str) -> dict[str, Any]:
    """Rows per table for one tenant, and summaries by status."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_COUNTS, {"t": tenant_id})
        counts = dict(await cur.fetchone())
        await cur.execute("SELECT status, count(*) AS n FROM memory WHERE tenant_id = %s GROUP BY status", (tenant_id,))
        by_status = {row["status"]: row["n"] for row in await cur.fetchall()}
    counts["summaries"] = {status: by_status.get(status, 0) for status in ("processing", "completed", "failed")}
    return counts


_EXPORT_FACTS = """
SELECT 'fact' AS kind, fact_id AS id, content, category, memory_type, importance, tags, visibility, subject_id,
       source_conversation_id AS conversation_id, source_chunk_id AS chunk_id,
       (SELECT k.message_range_start FROM conversation_chunks k WHERE k.chunk_id = f.source_chunk_id) AS range_start,
       (SELECT k.message_range_end FROM conversation_chunks k WHERE k.chunk_id = f.source_chunk_id) AS range_end,
       source_event_ids, event_id, extracted_by, prompt_version, embedding_model, valid_from, valid_to, deleted_at,
       created_at, updated_at,
       COALESCE((SELECT a.access_count FROM fact_access a WHERE a.fact_id = f.fact_id), 0) AS access_count
  FROM facts f WHERE tenant_id = %(t)s AND owner_user_id = %(u)s ORDER BY valid_from, fact_id
"""
_EXPORT_CHUNKS = """
SELECT 'chunk' AS kind, chunk_id AS id, content, subject_id, conversation_id, message_range_start AS range_start,
       message_range_end AS range_end, source_event_ids, event_id, model, prompt_version, embedding_model,
       occurred_start, occurred_end, created_at
  FROM conversation_chunks WHERE tenant_id = %(t)s AND user_id = %(u)s ORDER BY occurred_start, chunk_id
"""
_EXPORT_SUMMARIES = """
SELECT 'summary' AS kind, s.conversation_id || ':' || s.memory_id AS id, s.memory_text AS content, c.subject_id,
       s.conversation_id, s.start_sequence AS range_start, s.end_sequence + 1 AS range_end, s.source_event_ids,
       s.result_event_id AS event_id, s.model, s.prompt_version, s.status, s.base_memory_id, s.generation_time_ms,
       s.created_at, s.completed_at
  FROM memory s JOIN conversations c ON c.tenant_id = s.tenant_id AND c.conversation_id = s.conversation_id
 WHERE s.tenant_id = %(t)s AND c.user_id = %(u)s AND s.status = 'completed'
 ORDER BY s.conversation_id, s.memory_id
"""


async def export_rows(conn: psycopg.AsyncConnection, tenant_id: str, user_id: str, *, batch: int = 500
                      ) -> AsyncIterator[dict[str, Any]]:
    """The user's facts (every version: superseded and deleted ones say so), chunks and completed
    summaries, each with its provenance; read with a server-side cursor, `batch` rows at a time."""
    for sql in (_EXPORT_FACTS, _EXPORT_CHUNKS, _EXPORT_SUMMARIES):
        async with conn.cursor(name=f"export_{sql.split()[2].strip(chr(39))}", row_factory=dict_row) as cur:
            cur.itersize = batch
            await cur.execute(sql, {"t": tenant_id, "u": user_id})
            async for row in cur:
                yield row



async def stored_outcome(conn: psycopg.AsyncConnection, tenant_id: str, owner: str, fact_id: str, event_id: str
                         ) -> tuple[str, str] | None:
    """Where a memory.stored event ended up once projected: (fact_id, "stored") as a new fact,
    (the existing fact's id, "merged") when dedup merged it; None before it is projected."""
    cur = await conn.execute(
        "SELECT fact_id FROM facts WHERE tenant_id = %s AND owner_user_id = %s"
        " AND (fact_id = %s OR %s = ANY(source_event_ids)) ORDER BY fact_id = %s DESC LIMIT 1",
        (tenant_id, owner, fact_id, event_id, fact_id))
    row = await cur.fetchone()
    return None if row is None else (row[0], "stored" if row[0] == fact_id else "merged")

"""Read side of lineage (docs/lineage.md): each derived row back to its messages, a message
forward to what was derived from it, and the contexts that included them. Tenant-scoped;
who may see what is decided by the caller (api/routes/lineage.py)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

MAX_SOURCES = 200  # messages listed per item (`sources_total` counts them all)
EXCERPT = 160

_MESSAGE = (f"SELECT conversation_id, seq, event_id, occurred_at, role, left(content, {EXCERPT}) AS excerpt,"
            " user_id FROM messages")


async def _all(conn: psycopg.AsyncConnection, sql: str, params: Any) -> list[dict]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return await cur.fetchall()


async def _one(conn: psycopg.AsyncConnection, sql: str, params: Any) -> dict | None:
    rows = await _all(conn, sql, params)
    return rows[0] if rows else None


async def conversation_owner(conn, tenant: str, conversation: str) -> str | None:
    row = await _one(conn, "SELECT user_id FROM conversations WHERE tenant_id = %s AND conversation_id = %s",
                     (tenant, conversation))
    return row["user_id"] if row else None


async def messages_in_range(conn, tenant: str, conversation: str, first: int, last: int) -> list[dict]:
    """Messages first..last (inclusive) of a conversation, at most MAX_SOURCES."""
    return await _all(conn, _MESSAGE + " WHERE tenant_id = %s AND conversation_id = %s AND seq BETWEEN %s AND %s"
                      " ORDER BY seq LIMIT %s", (tenant, conversation, first, last, MAX_SOURCES))


async def messages_by_event(conn, tenant: str, event_ids: list[str]) -> list[dict]:
    return await _all(conn, _MESSAGE + " WHERE tenant_id = %s AND event_id = ANY(%s) ORDER BY conversation_id, seq"
                      " LIMIT %s", (tenant, event_ids, MAX_SOURCES))


async def messages_by_seqs(conn, tenant: str, conversation: str, seqs: list[int]) -> list[dict]:
    return await _all(conn, _MESSAGE + " WHERE tenant_id = %s AND conversation_id = %s AND seq = ANY(%s)"
                      " ORDER BY seq LIMIT %s", (tenant, conversation, seqs, MAX_SOURCES))


async def summary(conn, tenant: str, conversation: str, memory_id: int) -> dict | None:
    return await _one(conn, "SELECT memory_id, start_sequence, end_sequence, base_memory_id, status, prompt_version,"
                      " model, source_event_ids, memory_text, created_at, completed_at FROM memory WHERE tenant_id = %s"
                      " AND conversation_id = %s AND memory_id = %s", (tenant, conversation, memory_id))


async def chunk(conn, tenant: str, chunk_id: str) -> dict | None:
    return await _one(conn, "SELECT chunk_id, conversation_id, user_id, content, message_range_start,"
                      " message_range_end, prompt_version, model, embedding_model, source_event_ids, created_at"
                      " FROM conversation_chunks WHERE tenant_id = %s AND chunk_id = %s", (tenant, chunk_id))


async def fact(conn, tenant: str, fact_id: str) -> dict | None:
    return await _one(conn, "SELECT fact_id, owner_user_id, visibility, content, source_conversation_id,"
                      " source_chunk_id, source_event_ids, extracted_by AS model, prompt_version, embedding_model,"
                      " valid_from, valid_to, deleted_at FROM facts WHERE tenant_id = %s AND fact_id = %s",
                      (tenant, fact_id))


async def fact_history(conn, fact_id: str) -> list[dict]:
    return await _all(conn, "SELECT change, old_content, new_content, detail, event_id, changed_at FROM fact_history"
                      " WHERE fact_id = %s ORDER BY changed_at, id", (fact_id,))


async def fact_links(conn, fact_id: str) -> list[dict]:
    return await _all(conn, "SELECT from_fact_id, to_fact_id, relationship, event_id FROM fact_links"
                      " WHERE from_fact_id = %s OR to_fact_id = %s", (fact_id, fact_id))


async def topic(conn, tenant: str, topic_id: str) -> dict | None:
    return await _one(conn, "SELECT topic_id, conversation_id, title, first_seq, summary_upto_seq, summary_model AS model,"
                      " summary_prompt_version AS prompt_version, created_event_id, created_at FROM topics"
                      " WHERE tenant_id = %s AND topic_id = %s ORDER BY conversation_id LIMIT 1", (tenant, topic_id))


async def topic_seqs(conn, tenant: str, conversation: str, topic_id: str) -> list[int]:
    rows = await _all(conn, "SELECT seq FROM topic_assignments WHERE tenant_id = %s AND conversation_id = %s"
                      " AND topic_id = %s ORDER BY seq", (tenant, conversation, topic_id))
    return [r["seq"] for r in rows]


async def topic_compactions(conn, tenant: str, conversation: str, topic_id: str) -> list[dict]:
    return await _all(conn, "SELECT upto_seq, archived_seqs, summary, prompt_version, model, event_id, projected_at"
                      " FROM topic_compactions WHERE tenant_id = %s AND conversation_id = %s AND topic_id = %s"
                      " ORDER BY upto_seq", (tenant, conversation, topic_id))


async def message(conn, tenant: str, conversation: str, seq: int) -> dict | None:
    return await _one(conn, _MESSAGE + " WHERE tenant_id = %s AND conversation_id = %s AND seq = %s",
                      (tenant, conversation, seq))


async def derived_from_message(conn, tenant: str, conversation: str, seq: int, event_id: str) -> dict[str, list]:
    """Everything derived from one message: summaries and chunks whose range holds it, facts
    naming its event, its topic (and the compaction that archived it), its embedding."""
    key = (tenant, conversation, seq)
    return {
        "summary": await _all(conn, "SELECT memory_id, start_sequence, end_sequence, status, prompt_version, model"
                              " FROM memory WHERE tenant_id = %s AND conversation_id = %s AND start_sequence <= %s"
                              " AND end_sequence >= %s ORDER BY memory_id", (*key, seq)),
        "chunk": await _all(conn, "SELECT chunk_id, message_range_start, message_range_end, prompt_version, model,"
                            " embedding_model FROM conversation_chunks WHERE tenant_id = %s AND conversation_id = %s"
                            " AND message_range_start <= %s AND message_range_end > %s", (*key, seq)),
        "fact": await _all(conn, "SELECT fact_id, owner_user_id, visibility, left(content, 160) AS content,"
                           " extracted_by AS model, prompt_version, embedding_model, valid_to, deleted_at FROM facts"
                           " WHERE tenant_id = %s AND source_event_ids @> ARRAY[%s]::text[] ORDER BY fact_id",
                           (tenant, event_id)),
        "topic": await _all(conn, "SELECT a.topic_id, t.title, a.matched, a.similarity, a.event_id,"
                            " (SELECT c.upto_seq FROM topic_compactions c WHERE c.tenant_id = a.tenant_id"
                            "   AND c.conversation_id = a.conversation_id AND c.topic_id = a.topic_id"
                            "   AND %s = ANY(c.archived_seqs) LIMIT 1) AS archived_by_compaction_upto,"
                            " t.summary_model AS model, t.summary_prompt_version AS prompt_version"
                            " FROM topic_assignments a LEFT JOIN topics t USING (tenant_id, conversation_id, topic_id)"
                            " WHERE a.tenant_id = %s AND a.conversation_id = %s AND a.seq = %s", (seq, *key)),
        "embedding": await _all(conn, "SELECT embedding_model FROM message_embeddings WHERE tenant_id = %s"
                                " AND conversation_id = %s AND seq = %s", key),
    }


async def served_with(conn, tenant: str, *, kind: str, item_id: str, conversation: str | None = None,
                      summary_id: int | None = None, topic_id: str | None = None, gap_seq: int | None = None,
                      user: str, limit: int = 50) -> list[dict]:
    """Served contexts (of `user`) that included the item: retrieved, as the summary, as the
    active topic, or verbatim in the gap."""
    return await _all(
        conn, "SELECT event_id, conversation_id, turn_seq, served_at FROM served_contexts WHERE tenant_id = %(t)s"
        " AND user_id = %(u)s AND (payload -> 'retrieved' @> %(item)s"
        " OR (conversation_id = %(c)s AND (summary_memory_id = %(s)s OR active_topic_id = %(topic)s"
        "     OR %(g)s::int BETWEEN gap_from_seq AND gap_to_seq)))"
        " ORDER BY served_at DESC LIMIT %(limit)s",
        {"t": tenant, "u": user, "item": Jsonb([{"kind": kind, "id": item_id}]), "c": conversation,
         "s": summary_id, "topic": topic_id, "g": gap_seq, "limit": limit})


async def served_at_turn(conn, tenant: str, conversation: str, turn_seq: int) -> list[dict]:
    """The recorded contexts of one turn, newest first."""
    return await _all(conn, "SELECT event_id, user_id, subject_id, served_at, payload FROM served_contexts"
                      " WHERE tenant_id = %s AND conversation_id = %s AND turn_seq = %s ORDER BY served_at DESC",
                      (tenant, conversation, turn_seq))

"""The read model as it was at a past moment (docs/lineage.md, "as of"): rows carry when they
were projected, completed, superseded, edited or deleted, so a past turn's context can be
rebuilt. Times compare with the API's clock (one machine, or synchronized clocks)."""

from __future__ import annotations

from datetime import datetime

import psycopg

from projections.lineage_queries import _all, _one


async def message_projected_at(conn: psycopg.AsyncConnection, tenant: str, conversation: str, seq: int):
    row = await _one(conn, "SELECT projected_at FROM messages WHERE tenant_id = %s AND conversation_id = %s"
                     " AND seq = %s", (tenant, conversation, seq))
    return row["projected_at"] if row else None


async def memory_rows(conn, tenant: str, conversation: str, at: datetime) -> list[dict]:
    """Summary rows that existed at `at`, each with the status it had then."""
    return await _all(
        conn, "SELECT memory_id, start_sequence, end_sequence, base_memory_id, prompt_version, model,"
        " CASE WHEN completed_at <= %(at)s THEN 'completed'"
        "      WHEN status = 'failed' AND updated_at <= %(at)s THEN 'failed' ELSE 'processing' END AS status,"
        " CASE WHEN completed_at <= %(at)s THEN memory_text END AS memory_text"
        " FROM memory WHERE tenant_id = %(t)s AND conversation_id = %(c)s AND created_at <= %(at)s"
        " ORDER BY memory_id DESC LIMIT 20", {"t": tenant, "c": conversation, "at": at})


async def newest_messages(conn, tenant: str, conversation: str, *, after_seq: int, before_seq: int, at: datetime,
                          limit: int) -> list[dict]:
    rows = await _all(conn, "SELECT seq, role, content, occurred_at FROM messages WHERE tenant_id = %s"
                      " AND conversation_id = %s AND seq > %s AND seq < %s AND projected_at <= %s"
                      " ORDER BY seq DESC LIMIT %s", (tenant, conversation, after_seq, before_seq, at, limit))
    return rows[::-1]


async def last_seq(conn, tenant: str, conversation: str, at: datetime) -> int:
    row = await _one(conn, "SELECT max(seq) AS last FROM messages WHERE tenant_id = %s AND conversation_id = %s"
                     " AND projected_at <= %s", (tenant, conversation, at))
    return -1 if row is None or row["last"] is None else row["last"]


async def missing_seqs(conn, tenant: str, conversation: str, after_seq: int, upto_seq: int, at: datetime) -> list[int]:
    if upto_seq <= after_seq:
        return []
    rows = await _all(conn, "SELECT s FROM generate_series(%s::int, %s::int) s WHERE NOT EXISTS (SELECT 1 FROM messages m"
                      " WHERE m.tenant_id = %s AND m.conversation_id = %s AND m.seq = s AND m.projected_at <= %s)"
                      " ORDER BY s LIMIT 100", (after_seq + 1, upto_seq, tenant, conversation, at))
    return [r["s"] for r in rows]


async def fact_at(conn, tenant: str, fact_id: str, at: datetime) -> str | None:
    """A fact's content at `at`, or None when it was not in memory then (not yet projected,
    superseded or deleted): today's content with the later edits and merges undone."""
    row = await _one(conn, "SELECT content, created_at, valid_to, deleted_at FROM facts WHERE tenant_id = %s"
                     " AND fact_id = %s", (tenant, fact_id))
    if row is None or row["created_at"] > at or (row["valid_to"] is not None and row["valid_to"] <= at) \
            or (row["deleted_at"] is not None and row["deleted_at"] <= at):
        return None
    content = row["content"]
    later = await _all(conn, "SELECT old_content FROM fact_history WHERE fact_id = %s AND changed_at > %s"
                       " AND old_content IS NOT NULL ORDER BY changed_at DESC, id DESC", (fact_id, at))
    for change in later:
        content = change["old_content"]
    return content


async def chunk_at(conn, tenant: str, chunk_id: str, at: datetime) -> str | None:
    row = await _one(conn, "SELECT content FROM conversation_chunks WHERE tenant_id = %s AND chunk_id = %s"
                     " AND created_at <= %s", (tenant, chunk_id, at))
    return row["content"] if row else None


async def message_at(conn, tenant: str, message_id: str, at: datetime) -> str | None:
    conversation, _, seq = message_id.rpartition(":")
    if not seq.isdigit():
        return None
    row = await _one(conn, "SELECT content FROM messages WHERE tenant_id = %s AND conversation_id = %s AND seq = %s"
                     " AND projected_at <= %s", (tenant, conversation, int(seq), at))
    return row["content"] if row else None


async def active_topic(conn, tenant: str, conversation: str, turn_seq: int, at: datetime) -> dict | None:
    """The active topic at `at` for turn `turn_seq`: its summary then and its not-yet-archived messages."""
    key = {"t": tenant, "c": conversation, "turn": turn_seq, "at": at}
    active = await _one(conn, "SELECT a.topic_id, t.title FROM topic_activations a LEFT JOIN topics t"
                        " USING (tenant_id, conversation_id, topic_id) WHERE a.tenant_id = %(t)s"
                        " AND a.conversation_id = %(c)s AND a.seq <= %(turn)s AND a.projected_at <= %(at)s"
                        " ORDER BY a.seq DESC LIMIT 1", key)
    if active is None:
        return None
    key["topic"] = active["topic_id"]
    compaction = await _one(conn, "SELECT upto_seq, summary FROM topic_compactions WHERE tenant_id = %(t)s"
                            " AND conversation_id = %(c)s AND topic_id = %(topic)s AND projected_at <= %(at)s"
                            " ORDER BY upto_seq DESC LIMIT 1", key)
    key["upto"] = compaction["upto_seq"] if compaction else -1
    seqs = await _all(conn, "SELECT seq FROM topic_assignments WHERE tenant_id = %(t)s AND conversation_id = %(c)s"
                      " AND topic_id = %(topic)s AND seq > %(upto)s AND seq < %(turn)s AND projected_at <= %(at)s"
                      " ORDER BY seq", key)
    return {"topic_id": active["topic_id"], "title": active["title"], "summary_upto_seq": key["upto"],
            "summary": compaction["summary"] if compaction else None, "message_seqs": [r["seq"] for r in seqs]}


async def generation_built_after(conn, topic_prefix: str, at: datetime) -> dict | None:
    """The generation being read (the search_path's), when it was created after `at` (a replay
    built it later: its rows carry later processing times); else None."""
    return await _one(conn, "SELECT name, created_at FROM public.memory_generations WHERE topic_prefix = %s"
                      " AND 'gen_' || name = current_schema() AND created_at > %s", (topic_prefix, at))

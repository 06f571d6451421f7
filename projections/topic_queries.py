"""Read queries over the topic projection (every query scoped by tenant) and seed 004's stats."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
from psycopg.rows import class_row

from domain.topics.archive import decompress_bytes
from domain.topics.decay import (
    SECONDS_PER_DAY,
    TopicConfig,
    consolidation_stage,
    half_life_seconds,
    memory_type,
    priority,
)


@dataclass(frozen=True)
class TopicConversationRow:
    active_topic_id: str | None
    activated_seq: int | None
    last_seq: int


@dataclass(frozen=True)
class TopicRow:
    topic_id: str
    title: str
    first_seq: int
    summary: str | None
    summary_upto_seq: int
    summary_model: str | None
    summary_prompt_version: str | None
    importance: float
    access_count: int
    message_count: int
    created_at: datetime
    last_active_at: datetime
    active: bool
    restored_at_seq: int | None
    compaction_status: str | None
    compactions: int
    evicted_at: datetime | None
    evicted_priority: float | None
    evicted_reason: str | None
    active_messages: int
    archived_messages: int
    archive_json_bytes: int | None
    archive_gzip_bytes: int | None


@dataclass(frozen=True)
class TopicMessageRow:
    seq: int
    role: str
    content: str
    occurred_at: datetime
    archived: bool = False


_TOPICS = """
SELECT t.topic_id, t.title, t.first_seq, t.summary, t.summary_upto_seq, t.summary_model, t.summary_prompt_version,
       t.importance, t.access_count, t.message_count, t.created_at, t.last_active_at, t.active, t.restored_at_seq,
       t.compaction_status, t.compactions, t.evicted_at, t.evicted_priority, t.evicted_reason,
       (SELECT count(*) FROM topic_messages m WHERE m.tenant_id = t.tenant_id
           AND m.conversation_id = t.conversation_id AND m.topic_id = t.topic_id)::int AS active_messages,
       coalesce(a.message_count, 0) AS archived_messages, a.json_bytes AS archive_json_bytes,
       a.gzip_bytes AS archive_gzip_bytes
  FROM topics t
  LEFT JOIN topic_archives a USING (tenant_id, conversation_id, topic_id)
 WHERE t.tenant_id = %(tenant)s AND t.conversation_id = %(conversation)s
"""


async def get_topic_conversation(conn: psycopg.AsyncConnection, tenant_id: str,
                                 conversation_id: str) -> TopicConversationRow | None:
    async with conn.cursor(row_factory=class_row(TopicConversationRow)) as cur:
        await cur.execute("SELECT active_topic_id, activated_seq, last_seq FROM topic_conversations"
                          " WHERE tenant_id = %s AND conversation_id = %s", (tenant_id, conversation_id))
        return await cur.fetchone()


async def list_topics(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str, *,
                      include_evicted: bool = True) -> list[TopicRow]:
    """Topics in creation order; the evicted ones too unless asked otherwise."""
    sql = _TOPICS + ("" if include_evicted else " AND t.evicted_at IS NULL") + " ORDER BY t.first_seq, t.topic_id"
    async with conn.cursor(row_factory=class_row(TopicRow)) as cur:
        await cur.execute(sql, {"tenant": tenant_id, "conversation": conversation_id})
        return await cur.fetchall()


TOPIC_SQL = _TOPICS + " AND t.topic_id = %(topic)s"  # one topic (named parameters)
# The topic the conversation's topic_conversations row names active (named parameters).
ACTIVE_TOPIC_SQL = _TOPICS + (" AND t.topic_id = (SELECT active_topic_id FROM topic_conversations"
                              " WHERE tenant_id = %(tenant)s AND conversation_id = %(conversation)s)")
# The topic's messages not yet archived, in seq order, before a seq if given (positional:
# tenant, conversation, topic, before, before).
ACTIVE_MESSAGES_SQL = (
    "SELECT seq, role, content, occurred_at FROM topic_messages WHERE tenant_id = %s"
    " AND conversation_id = %s AND topic_id = %s AND (%s::int IS NULL OR seq < %s::int) ORDER BY seq"
)


async def get_topic(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str,
                    topic_id: str) -> TopicRow | None:
    async with conn.cursor(row_factory=class_row(TopicRow)) as cur:
        await cur.execute(TOPIC_SQL, {"tenant": tenant_id, "conversation": conversation_id, "topic": topic_id})
        return await cur.fetchone()


async def active_messages(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str, topic_id: str, *,
                          before_seq: int | None = None) -> list[TopicMessageRow]:
    """The topic's messages not yet archived, in seq order, before `before_seq` if given."""
    async with conn.cursor(row_factory=class_row(TopicMessageRow)) as cur:
        await cur.execute(ACTIVE_MESSAGES_SQL, (tenant_id, conversation_id, topic_id, before_seq, before_seq))
        return await cur.fetchall()


async def archive_bytes(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str,
                        topic_id: str) -> bytes | None:
    """The stored archive as it is: gzip of the JSON list (None when nothing is archived)."""
    cur = await conn.execute("SELECT archive FROM topic_archives WHERE tenant_id = %s AND conversation_id = %s"
                             " AND topic_id = %s", (tenant_id, conversation_id, topic_id))
    row = await cur.fetchone()
    return bytes(row[0]) if row else None


async def archived_messages(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str,
                            topic_id: str) -> list[TopicMessageRow]:
    """The archive decompressed, in seq order."""
    return [TopicMessageRow(m.seq, m.role, m.content, datetime.fromtimestamp(m.timestamp, UTC), archived=True)
            for m in decompress_bytes(await archive_bytes(conn, tenant_id, conversation_id, topic_id))]


async def history(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str,
                  topic_id: str) -> list[TopicMessageRow]:
    """The whole topic: archived then active messages, in seq order, nothing twice."""
    rows = {m.seq: m for m in await archived_messages(conn, tenant_id, conversation_id, topic_id)}
    for m in await active_messages(conn, tenant_id, conversation_id, topic_id):
        rows.setdefault(m.seq, m)
    return [rows[seq] for seq in sorted(rows)]


def topic_stats(row: TopicRow, now: datetime, config: TopicConfig) -> dict:
    """Seed 004's get_topic_stats fields at `now`, plus priority and lifecycle fields."""
    age = max((now - row.created_at).total_seconds(), 0.0)
    inactive = max((now - row.last_active_at).total_seconds(), 0.0)
    return {
        "topic_id": row.topic_id, "topic_title": row.title,
        "active_messages": row.active_messages, "compressed_messages": row.archived_messages,
        "total_messages": row.message_count, "has_summary": row.summary is not None,
        "importance_score": row.importance, "access_count": row.access_count,
        "memory_type": memory_type(row.access_count, config),
        "consolidation_stage": consolidation_stage(row.access_count, config),
        "half_life_days": half_life_seconds(row.access_count, config) / SECONDS_PER_DAY,
        "age_seconds": age, "inactive_seconds": inactive,
        "priority": priority(row.importance, inactive, row.access_count, config),
    }

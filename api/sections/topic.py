"""The active topic (summary + recent messages, archive when restored) for the turn-start context."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg
from pydantic import BaseModel

from retrieval.request import ContextRequest
from projections import topic_queries as tq
from domain.topics import restore
from domain.topics.decay import TopicConfig
from retrieval.search import column_names, one_query
from retrieval.service import line_tokens

log = logging.getLogger(__name__)


class TopicMessageOut(BaseModel):
    seq: int
    role: str
    content: str
    occurred_at: datetime
    archived: bool = False


class TopicStatsOut(BaseModel):
    """Seed 004's get_topic_stats fields, then priority and the topic's lifecycle."""

    topic_id: str
    topic_title: str
    active_messages: int
    compressed_messages: int
    total_messages: int
    has_summary: bool
    importance_score: float
    access_count: int
    memory_type: Literal["short-term", "long-term"]
    consolidation_stage: Literal["short-term", "transitioning", "long-term"]
    half_life_days: float
    age_seconds: float
    inactive_seconds: float
    priority: float
    active: bool
    evicted: bool
    evicted_at: datetime | None = None
    evicted_reason: str | None = None
    created_at: datetime
    last_active_at: datetime
    summary: str | None = None
    summary_upto_seq: int
    compaction_status: str | None = None
    compactions: int
    archive_json_bytes: int | None = None
    archive_gzip_bytes: int | None = None


class ActiveTopicOut(BaseModel):
    """What the chat service prepends for the topic at hand. `restored_messages` holds the
    archive (decompressed, in order) while the topic is back from it: reactivated with an
    archive, until it is deactivated or compacted again; of a long archive, the part that fits
    `restore_max_tokens`, the messages sharing the most words with the current message first
    (`restored_truncated`: some were left out)."""

    topic_id: str
    title: str
    summary: str | None
    summary_upto_seq: int
    messages: list[TopicMessageOut]
    restored: bool
    restored_messages: list[TopicMessageOut]
    restored_truncated: bool = False
    stats: TopicStatsOut
    # The newest message the topic fold has placed: the section reflects the log up to it.
    as_of_seq: int


def stats_out(row: tq.TopicRow, now: datetime, config: TopicConfig) -> TopicStatsOut:
    return TopicStatsOut(
        **tq.topic_stats(row, now, config), active=row.active, evicted=row.evicted_at is not None,
        evicted_at=row.evicted_at, evicted_reason=row.evicted_reason, created_at=row.created_at,
        last_active_at=row.last_active_at, summary=row.summary, summary_upto_seq=row.summary_upto_seq,
        compaction_status=row.compaction_status, compactions=row.compactions,
        archive_json_bytes=row.archive_json_bytes, archive_gzip_bytes=row.archive_gzip_bytes,
    )


def message_out(row: tq.TopicMessageRow) -> TopicMessageOut:
    return TopicMessageOut(seq=row.seq, role=row.role, content=row.content, occurred_at=row.occurred_at,
                           archived=row.archived)


def placed_params(request: ContextRequest) -> dict:
    """PLACED_SQL's parameters (a caller may send it with its other reads: api/turn_context.py)."""
    target = request.conversation.last_seq if request.before_seq is None else request.before_seq
    return {"tenant": request.tenant_id, "conversation": request.conversation.conversation_id, "target": target}


async def _placed_up_to(conn: psycopg.AsyncConnection, request: ContextRequest, wait_ms: int,
                        placed: tuple | None = None) -> tuple[tq.TopicConversationRow | None, bool]:
    """The fold's progress, after waiting (briefly) for it to place the current message, and
    whether it had placed it at the first look (no wait). `placed`: PLACED_SQL's row, if the
    caller read it already."""
    tenant, conversation = request.tenant_id, request.conversation.conversation_id
    # One statement: the seq to wait for and the fold's progress (re-read alone while waiting).
    if placed is None:
        placed = await (await conn.execute(PLACED_SQL, placed_params(request))).fetchone()
    wanted, found, *progress = placed
    state = tq.TopicConversationRow(*progress) if found else None
    deadline = time.monotonic() + wait_ms / 1000
    first = True
    while True:
        if wanted is None or (state is not None and state.last_seq >= wanted):
            return state, first
        if time.monotonic() >= deadline:
            return state, False
        first = False
        await asyncio.sleep(0.02)
        state = await tq.get_topic_conversation(conn, tenant, conversation)


# System and tool messages are never placed: the wait is for the newest user/assistant message.
PLACED_SQL = (
    "SELECT (SELECT max(seq) FROM messages WHERE tenant_id = %(tenant)s AND conversation_id = %(conversation)s"
    " AND seq <= %(target)s AND role IN ('user', 'assistant')), tc.tenant_id IS NOT NULL,"
    " tc.active_topic_id, tc.activated_seq, tc.last_seq FROM (SELECT 1) one"
    " LEFT JOIN topic_conversations tc ON tc.tenant_id = %(tenant)s AND tc.conversation_id = %(conversation)s"
)


# The conversation's active topic and its messages before the turn (TOPIC_SQL and
# ACTIVE_MESSAGES_SQL with the topic the fold's progress row names), for a caller that sends
# them with its first reads, before it knows whether the fold is up to date (api/turn_context.py):
# the section uses them only when it is, and when both name the topic its progress row named.
# The messages' statement names its topic on every row, and once with no message (NULL seq).
AHEAD_TOPIC_SQL = tq.ACTIVE_TOPIC_SQL
AHEAD_MESSAGES_SQL = (
    "SELECT tc.active_topic_id, m.seq, m.role, m.content, m.occurred_at FROM topic_conversations tc"
    " LEFT JOIN LATERAL (SELECT seq, role, content, occurred_at FROM topic_messages WHERE tenant_id = tc.tenant_id"
    " AND conversation_id = tc.conversation_id AND topic_id = tc.active_topic_id"
    " AND (%(before)s::int IS NULL OR seq < %(before)s::int)) m ON true"
    " WHERE tc.tenant_id = %(tenant)s AND tc.conversation_id = %(conversation)s AND tc.active_topic_id IS NOT NULL"
    " ORDER BY m.seq"
)


def ahead_params(request: ContextRequest) -> dict:
    """AHEAD_TOPIC_SQL's and AHEAD_MESSAGES_SQL's parameters."""
    return {"tenant": request.tenant_id, "conversation": request.conversation.conversation_id,
            "before": request.before_seq}


@dataclass(frozen=True)
class TopicAhead:
    """AHEAD_TOPIC_SQL's row (its column names and values; None: no active topic) and
    AHEAD_MESSAGES_SQL's rows, as a caller read them with its first reads."""

    names: list[str]
    found: tuple | None
    messages: list[tuple]

    def for_topic(self, topic_id: str) -> tuple[tq.TopicRow, list[tq.TopicMessageRow]] | None:
        """The topic's row and messages if both statements read `topic_id`, else None (the
        fold moved on between the statements: the section reads them again)."""
        if self.found is None or self.found[self.names.index("topic_id")] != topic_id:
            return None
        if not self.messages or any(row[0] != topic_id for row in self.messages):
            return None
        return (tq.TopicRow(**dict(zip(self.names, self.found))),
                [tq.TopicMessageRow(*row[1:]) for row in self.messages if row[1] is not None])


async def _topic_and_recent(conn: psycopg.AsyncConnection, request: ContextRequest, topic_id: str
                            ) -> tuple[tq.TopicRow | None, list[tq.TopicMessageRow]]:
    """tq.get_topic and tq.active_messages (before the turn) in one round trip."""
    tenant, conversation, before = request.tenant_id, request.conversation.conversation_id, request.before_seq
    statements = [(tq.TOPIC_SQL, {"tenant": tenant, "conversation": conversation, "topic": topic_id}),
                  (tq.ACTIVE_MESSAGES_SQL, (tenant, conversation, topic_id, before, before))]
    async with conn.cursor() as cur:
        await cur.execute(one_query(conn, statements))
        names, found = column_names(cur), await cur.fetchone()
        cur.nextset()
        recent = [tq.TopicMessageRow(*values) for values in await cur.fetchall()]
    return (None if found is None else tq.TopicRow(**dict(zip(names, found)))), recent


class TopicErrorOut(BaseModel):
    """What ContextOut.active_topic holds when the topic section failed: the rest answers."""

    error: str


async def topic_section(conn: psycopg.AsyncConnection, request: ContextRequest, app_state: Any, *,
                        placed: tuple | None = None, ahead: TopicAhead | None = None) -> Any | None:
    """ActiveTopicOut for ContextOut.active_topic, None before the first topic, TopicErrorOut
    (with the reason) when it could not be read: a failing section never fails the context.
    `placed`: PLACED_SQL's row (placed_params), if the caller sent it with its other reads;
    `ahead`: the active topic and its messages read with them (used when the fold had placed
    the current message by then, and they name the topic it had active)."""
    try:
        return await _topic_section(conn, request, app_state, placed, ahead)
    except Exception as error:  # noqa: BLE001
        log.exception("topic section failed")
        await conn.rollback()
        return TopicErrorOut(error=f"{type(error).__name__}: {error}")


async def _topic_section(conn: psycopg.AsyncConnection, request: ContextRequest, app_state: Any,
                         placed: tuple | None = None, ahead: TopicAhead | None = None) -> Any | None:
    settings = app_state.settings.topics
    state, at_once = await _placed_up_to(conn, request, settings.context_wait_ms, placed)
    if state is None or state.active_topic_id is None:
        return None
    tenant, conversation = request.tenant_id, request.conversation.conversation_id
    read = ahead.for_topic(state.active_topic_id) if ahead is not None and at_once and placed is not None else None
    row, recent = read if read is not None else await _topic_and_recent(conn, request, state.active_topic_id)
    if row is None:
        return None
    restored: list[tq.TopicMessageRow] = []
    if row.restored_at_seq is not None:
        restored = await tq.archived_messages(conn, tenant, conversation, row.topic_id)
    keep = restored[-settings.restore_max_messages:] if settings.restore_max_messages else []
    keep = restore.select(keep, request.query, settings.restore_max_tokens, line_tokens)
    return ActiveTopicOut(
        topic_id=row.topic_id, title=row.title, summary=row.summary, summary_upto_seq=row.summary_upto_seq,
        messages=[message_out(m) for m in recent], restored=row.restored_at_seq is not None,
        restored_messages=[message_out(m) for m in keep], restored_truncated=len(keep) < len(restored),
        stats=stats_out(row, request.now, TopicConfig.from_settings(settings)), as_of_seq=state.last_seq,
    )

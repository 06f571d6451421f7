"""Read queries over the projected log (scoped by tenant in every query)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

import psycopg
from psycopg.rows import class_row


@dataclass(frozen=True)
class ConversationRow:
    tenant_id: str
    conversation_id: str
    user_id: str
    subject_id: str | None
    last_seq: int
    message_count: int
    gap_count: int


@dataclass(frozen=True)
class MessageRow:
    seq: int
    event_id: str
    role: str
    content: str
    metadata: dict[str, Any]
    occurred_at: datetime


CONVERSATION_SQL = ("SELECT tenant_id, conversation_id, user_id, subject_id, last_seq, message_count, gap_count"
                    " FROM conversations WHERE tenant_id = %s AND conversation_id = %s")


async def get_conversation(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str) -> ConversationRow | None:
    async with conn.cursor(row_factory=class_row(ConversationRow)) as cur:
        await cur.execute(CONVERSATION_SQL, (tenant_id, conversation_id))
        return await cur.fetchone()


async def list_messages(
    conn: psycopg.AsyncConnection,
    tenant_id: str,
    conversation_id: str,
    *,
    after_seq: int = -1,
    before_seq: int | None = None,
    limit: int | None = None,
    newest: bool = False,
) -> list[MessageRow]:
    """Messages with after_seq < seq < before_seq, in seq order (with `newest`, the last `limit`)."""
    async with conn.cursor(row_factory=class_row(MessageRow)) as cur:
        await cur.execute(
            "SELECT seq, event_id, role, content, metadata, occurred_at FROM messages"
            " WHERE tenant_id = %s AND conversation_id = %s AND seq > %s"
            " AND (%s::int IS NULL OR seq < %s::int) ORDER BY seq" + (" DESC" if newest else "") + " LIMIT %s",
            (tenant_id, conversation_id, after_seq, before_seq, before_seq, limit),
        )
        rows = await cur.fetchall()
        return rows[::-1] if newest else rows


async def count_messages(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str, first: int, last: int
                         ) -> int:
    """Projected messages with first <= seq <= last."""
    cur = await conn.execute(
        "SELECT count(*) FROM messages WHERE tenant_id = %s AND conversation_id = %s AND seq BETWEEN %s AND %s",
        (tenant_id, conversation_id, first, last),
    )
    return (await cur.fetchone())[0]


async def missing_seqs(
    conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str, up_to_seq: int, *, after_seq: int = -1,
    limit: int = 1000,
) -> list[int]:
    """The first `limit` seqs in after_seq+1..up_to_seq that are not projected (gaps, or not yet
    arrived). Reads only the projected messages of the range (gaps between neighbours), never a
    series as long as the range: a hostile up_to_seq costs nothing. One statement: the gaps,
    then the tail nothing has reached."""
    cur = await conn.execute(
        "WITH s AS (SELECT seq, lag(seq, 1, %(after)s::int) OVER (ORDER BY seq) AS prev FROM messages"
        " WHERE tenant_id = %(tenant)s AND conversation_id = %(conversation)s AND seq > %(after)s"
        " AND seq <= %(up_to)s)"
        " SELECT gap_start, gap_end FROM ("
        " (SELECT prev + 1 AS gap_start, seq - 1 AS gap_end, 0 AS part, seq FROM s WHERE seq > prev + 1 ORDER BY seq"
        " LIMIT %(limit)s)"
        " UNION ALL SELECT COALESCE(max(seq), %(after)s::int) + 1, %(up_to)s::int, 1, 0 FROM s) AS ranges"
        " ORDER BY part, seq",
        {"after": after_seq, "tenant": tenant_id, "conversation": conversation_id, "up_to": up_to_seq,
         "limit": limit},
    )
    return expand_ranges(await cur.fetchall(), limit)


def missing_in(seqs: Sequence[int], up_to_seq: int, *, after_seq: int = -1, limit: int = 1000) -> list[int]:
    """missing_seqs from the projected seqs of the range already read (ascending, all of those
    in after_seq+1..up_to_seq; others are ignored): no statement."""
    ranges, prev = [], after_seq
    for seq in seqs:
        if after_seq < seq <= up_to_seq:
            if seq > prev + 1:
                ranges.append((prev + 1, seq - 1))
            prev = seq
    ranges.append((prev + 1, up_to_seq))  # the tail nothing has reached
    return expand_ranges(ranges, limit)


def expand_ranges(ranges: Sequence[tuple[int, int]], limit: int) -> list[int]:
    """The first `limit` seqs of inclusive ranges (in order), without building long ones."""
    missing: list[int] = []
    for start, end in ranges:
        missing.extend(range(start, min(end, start + limit - len(missing) - 1) + 1))
        if len(missing) >= limit:
            break
    return missing[:limit]


@dataclass(frozen=True)
class MemoryRow:
    memory_id: int
    start_sequence: int
    end_sequence: int
    base_memory_id: int | None
    status: str
    memory_text: str | None
    prompt_version: str
    model: str
    attempt: int
    generation_time_ms: int | None
    created_at: datetime
    completed_at: datetime | None


LIST_MEMORY_SQL = (
    "SELECT memory_id, start_sequence, end_sequence, base_memory_id, status, memory_text, prompt_version,"
    " model, attempt, generation_time_ms, created_at, completed_at FROM memory"
    " WHERE tenant_id = %s AND conversation_id = %s ORDER BY memory_id DESC LIMIT %s"
)


async def list_memory(
    conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str, *, limit: int = 50
) -> list[MemoryRow]:
    """The newest memory rows of a conversation (the version chain), newest first."""
    async with conn.cursor(row_factory=class_row(MemoryRow)) as cur:
        await cur.execute(LIST_MEMORY_SQL, (tenant_id, conversation_id, limit))
        return await cur.fetchall()

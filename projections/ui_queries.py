"""Read queries the dashboard needs beyond the public API's (every query scoped by tenant)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import class_row

from projections.fact_queries import _COLUMNS as FACT_COLUMNS
from projections.fact_queries import FactRow


@dataclass(frozen=True)
class ChunkRow:
    chunk_id: str
    user_id: str
    subject_id: str | None
    content: str
    message_range_start: int
    message_range_end: int  # exclusive
    model: str
    prompt_version: str
    embedding_model: str
    created_at: datetime


async def list_chunks(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str, *,
                      limit: int = 200) -> list[ChunkRow]:
    """The conversation's chunks in message order."""
    async with conn.cursor(row_factory=class_row(ChunkRow)) as cur:
        await cur.execute(
            "SELECT chunk_id, user_id, subject_id, content, message_range_start, message_range_end, model,"
            " prompt_version, embedding_model, created_at FROM conversation_chunks"
            " WHERE tenant_id = %s AND conversation_id = %s ORDER BY message_range_start LIMIT %s",
            (tenant_id, conversation_id, limit),
        )
        return await cur.fetchall()


async def sourced_facts(conn: psycopg.AsyncConnection, tenant_id: str, conversation_id: str, *,
                        limit: int = 500) -> list[FactRow]:
    """Facts extracted from this conversation, superseded ones included (the page shows their
    state), deleted ones not (seed 003: nobody sees them), oldest first."""
    async with conn.cursor(row_factory=class_row(FactRow)) as cur:
        await cur.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant_id = %s AND source_conversation_id = %s"
            " AND deleted_at IS NULL ORDER BY valid_from, fact_id LIMIT %s",
            (tenant_id, conversation_id, limit),
        )
        return await cur.fetchall()


@dataclass(frozen=True)
class TenantRow:
    tenant_id: str
    conversations: int
    messages: int
    last_activity_at: datetime | None


async def list_tenants(conn: psycopg.AsyncConnection, *, limit: int = 500) -> list[TenantRow]:
    """Every tenant with conversations in the active generation (the admin's tenant picker)."""
    async with conn.cursor(row_factory=class_row(TenantRow)) as cur:
        await cur.execute(
            "SELECT tenant_id, count(*)::int AS conversations, sum(message_count)::int AS messages,"
            " max(updated_at) AS last_activity_at FROM conversations GROUP BY tenant_id ORDER BY tenant_id LIMIT %s",
            (limit,),
        )
        return await cur.fetchall()


THROUGHPUT_WINDOWS = {"last_minute": "1 minute", "last_5_minutes": "5 minutes", "last_hour": "1 hour"}
_PER_WINDOW = """
SELECT count(*) FILTER (WHERE {time} > now() - interval '1 minute'),
       count(*) FILTER (WHERE {time} > now() - interval '5 minutes'),
       count(*)
  FROM {table} WHERE tenant_id = %s AND {time} > now() - interval '1 hour' {extra}"""
_MEASURES = {  # name -> (table, timestamp column, extra condition)
    "messages": ("messages", "projected_at", ""),
    "summaries_completed": ("memory", "completed_at", "AND status = 'completed'"),
    "summaries_failed": ("memory", "updated_at", "AND status = 'failed'"),
    "chunks": ("conversation_chunks", "created_at", ""),
    "facts": ("facts", "created_at", ""),
}


async def throughput(conn: psycopg.AsyncConnection, tenant_id: str) -> dict[str, dict[str, int]]:
    """What the read model took in over the last minute, 5 minutes and hour: messages projected,
    summaries completed or failed, chunks and facts recorded (by the rows' own timestamps; the
    last hour's rows only are read)."""
    out: dict[str, dict[str, int]] = {name: {} for name in THROUGHPUT_WINDOWS}
    for measure, (table, time, extra) in _MEASURES.items():
        cur = await conn.execute(_PER_WINDOW.format(table=table, time=time, extra=extra), (tenant_id,))
        for name, count in zip(THROUGHPUT_WINDOWS, await cur.fetchone(), strict=True):
            out[name][measure] = count
    return out


_PER_MINUTE = """
SELECT minute, count(m.projected_at)::int AS messages,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM m.projected_at - m.occurred_at))
         FILTER (WHERE m.occurred_at > now() - interval '1 hour' AND m.occurred_at <= m.projected_at) AS delay_p95_s
  FROM generate_series(date_trunc('minute', now()) - interval '59 minutes', date_trunc('minute', now()),
                       interval '1 minute') AS minute
  LEFT JOIN messages m ON m.tenant_id = %s AND m.projected_at > now() - interval '1 hour'
                      AND date_trunc('minute', m.projected_at) = minute
 GROUP BY minute ORDER BY minute"""


async def throughput_per_minute(conn: psycopg.AsyncConnection, tenant_id: str) -> list[dict]:
    """The last hour minute by minute (60 rows, empty minutes included): messages projected, and the
    95th percentile of their delay from the message's time to the read model (live messages only:
    a message dated before the hour, an import of history, is left out of the delay)."""
    cur = await conn.execute(_PER_MINUTE, (tenant_id,))
    return [{"minute": minute.isoformat(), "messages": messages,
             "delay_p95_s": None if delay is None else round(float(delay), 3)}
            for minute, messages, delay in await cur.fetchall()]

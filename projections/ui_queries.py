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
    """Facts extracted from this conversation, deleted and superseded ones included (the page
    shows their state), oldest first."""
    async with conn.cursor(row_factory=class_row(FactRow)) as cur:
        await cur.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant_id = %s AND source_conversation_id = %s"
            " ORDER BY valid_from, fact_id LIMIT %s",
            (tenant_id, conversation_id, limit),
        )
        return await cur.fetchall()

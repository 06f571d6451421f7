"""Read queries over facts for the API (every query scoped by tenant)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import orjson
import psycopg
from psycopg.rows import class_row

_COLUMNS = (
    "fact_id, tenant_id, owner_user_id, subject_id, category, memory_type, content, importance, tags, visibility,"
    " source_conversation_id, source_chunk_id, source_event_ids, embedding_model, extracted_by, prompt_version,"
    " COALESCE((SELECT a.access_count FROM fact_access a WHERE a.fact_id = facts.fact_id), 0) AS access_count,"
    " (SELECT a.last_accessed_at FROM fact_access a WHERE a.fact_id = facts.fact_id) AS last_accessed_at,"
    " valid_from, valid_to, deleted_at, created_at, updated_at"
)  # the access counts live in fact_access (migration 0017)


@dataclass(frozen=True)
class FactRow:
    fact_id: str
    tenant_id: str
    owner_user_id: str
    subject_id: str | None
    category: str
    memory_type: str
    content: str
    importance: int
    tags: list[str]
    visibility: str
    source_conversation_id: str | None
    source_chunk_id: str | None
    source_event_ids: list[str]
    embedding_model: str
    extracted_by: str
    prompt_version: str
    access_count: int
    last_accessed_at: datetime | None
    valid_from: datetime
    valid_to: datetime | None
    deleted_at: datetime | None
    created_at: datetime
    updated_at: datetime

    def visible_to(self, user_id: str) -> bool:
        """Seed 003: the owner sees their facts; others only shared ones; nobody sees deleted ones."""
        return self.deleted_at is None and (self.owner_user_id == user_id or self.visibility == "shared")


@dataclass(frozen=True)
class LinkRow:
    from_fact_id: str
    to_fact_id: str
    relationship: str


async def get_fact(conn: psycopg.AsyncConnection, tenant_id: str, fact_id: str) -> FactRow | None:
    async with conn.cursor(row_factory=class_row(FactRow)) as cur:
        await cur.execute(f"SELECT {_COLUMNS} FROM facts WHERE tenant_id = %s AND fact_id = %s", (tenant_id, fact_id))
        return await cur.fetchone()


async def list_facts(
    conn: psycopg.AsyncConnection,
    tenant_id: str,
    user_id: str,
    subject_id: str | None,
    *,
    any_subject: bool = False,
    include_superseded: bool = False,
    limit: int = 500,
) -> list[FactRow]:
    """The user's facts plus the facts others shared, for one subject (or every subject);
    current ones only unless `include_superseded` (history of the user's own facts)."""
    async with conn.cursor(row_factory=class_row(FactRow)) as cur:
        await cur.execute(
            f"SELECT {_COLUMNS} FROM facts WHERE tenant_id = %(tenant)s AND deleted_at IS NULL"
            " AND (%(any)s OR subject_id IS NOT DISTINCT FROM %(subject)s)"
            " AND (owner_user_id = %(user)s OR (visibility = 'shared' AND valid_to IS NULL))"
            " AND (%(history)s OR valid_to IS NULL)"
            " ORDER BY valid_from, fact_id LIMIT %(limit)s",
            {"tenant": tenant_id, "any": any_subject, "subject": subject_id, "user": user_id,
             "history": include_superseded, "limit": limit},
        )
        return await cur.fetchall()


async def links_of(conn: psycopg.AsyncConnection, fact_ids: list[str]) -> list[LinkRow]:
    """Links from or to any of these facts (supersedes / contradicts / elaborates)."""
    if not fact_ids:
        return []
    async with conn.cursor(row_factory=class_row(LinkRow)) as cur:
        await cur.execute(
            "SELECT from_fact_id, to_fact_id, relationship FROM fact_links"
            " WHERE from_fact_id = ANY(%s) OR to_fact_id = ANY(%s) ORDER BY from_fact_id, to_fact_id, relationship",
            (fact_ids, fact_ids),
        )
        return await cur.fetchall()


async def stored_embedding(conn: psycopg.AsyncConnection, tenant_id: str, fact_id: str) -> list[float] | None:
    """The fact's vector as floats (for a decision's content snapshot)."""
    cur = await conn.execute("SELECT embedding::text FROM facts WHERE tenant_id = %s AND fact_id = %s",
                             (tenant_id, fact_id))
    row = await cur.fetchone()
    return None if row is None else orjson.loads(row[0])


async def decision_projected(conn: psycopg.AsyncConnection, tenant_id: str, event_id: str) -> bool:
    cur = await conn.execute("SELECT 1 FROM fact_decisions WHERE tenant_id = %s AND event_id = %s",
                             (tenant_id, event_id))
    return await cur.fetchone() is not None

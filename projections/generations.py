"""The generations of a deployment: which exist, which one serves reads, switching and dropping."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from domain.secrets import redact_config


class GenerationError(RuntimeError):
    """A generation operation that cannot be done (unknown name, active, not caught up)."""


@dataclass(frozen=True)
class Generation:
    name: str
    status: str
    is_active: bool
    config: dict
    replay_until: datetime | None
    created_at: datetime
    activated_at: datetime | None


def list_generations(conn: psycopg.Connection, prefix: str) -> list[Generation]:
    with conn.cursor(row_factory=class_row(Generation)) as cur:
        cur.execute(
            "SELECT name, status, is_active, config, replay_until, created_at, activated_at"
            " FROM public.memory_generations WHERE topic_prefix = %s ORDER BY created_at",
            (prefix,),
        )
        rows = cur.fetchall()
    # No secret leaves the registry, whenever it was recorded (domain/secrets.py).
    return [replace(g, config=redact_config(g.config or {})) for g in rows]


def get_generation(conn: psycopg.Connection, prefix: str, name: str) -> Generation:
    for generation in list_generations(conn, prefix):
        if generation.name == name:
            return generation
    raise GenerationError(f"no generation {name!r} (see `memory-agent generations list`)")


def active_generation(conn: psycopg.Connection, prefix: str) -> str | None:
    row = conn.execute(
        "SELECT name FROM public.memory_generations WHERE topic_prefix = %s AND is_active", (prefix,)
    ).fetchone()
    return row[0] if row else None


def record_replay(conn: psycopg.Connection, prefix: str, name: str, config: dict, replay_until: datetime) -> None:
    config = redact_config(config)  # never a secret value in the registry
    with conn.transaction():
        conn.execute(
            "UPDATE public.memory_generations SET config = %s, replay_until = %s, status = 'building'"
            " WHERE topic_prefix = %s AND name = %s AND NOT is_active",
            (psycopg.types.json.Jsonb(config), replay_until, prefix, name),
        )


def activate(conn: psycopg.Connection, prefix: str, name: str) -> str | None:
    """Switch reads to `name` in one transaction; returns the previously active generation."""
    with conn.transaction():
        get_generation(conn, prefix, name)
        previous = active_generation(conn, prefix)
        conn.execute(
            "UPDATE public.memory_generations SET is_active = false, status = 'retired'"
            " WHERE topic_prefix = %s AND is_active AND name <> %s",
            (prefix, name),
        )
        conn.execute(
            "UPDATE public.memory_generations SET is_active = true, status = 'active', activated_at = now()"
            " WHERE topic_prefix = %s AND name = %s",
            (prefix, name),
        )
    return previous


def set_status(conn: psycopg.Connection, prefix: str, name: str, status: str) -> None:
    with conn.transaction():
        conn.execute(
            "UPDATE public.memory_generations SET status = %s WHERE topic_prefix = %s AND name = %s AND NOT is_active",
            (status, prefix, name),
        )


def drop(conn: psycopg.Connection, prefix: str, name: str) -> None:
    """Drop a generation's read model (its topics are dropped by the caller). Never the active one."""
    with conn.transaction():
        generation = get_generation(conn, prefix, name)
        if generation.is_active:
            raise GenerationError(f"{name!r} serves reads; activate another generation first")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(f"gen_{name}")))
        conn.execute("DELETE FROM public.memory_generations WHERE topic_prefix = %s AND name = %s", (prefix, name))
        conn.execute("DELETE FROM public.llm_cache_usage WHERE topic_prefix = %s AND generation = %s", (prefix, name))


def cache_usage(conn: psycopg.Connection, prefix: str, name: str) -> dict[str, dict[str, int]]:
    rows = conn.execute(
        "SELECT kind, hits, calls FROM public.llm_cache_usage WHERE topic_prefix = %s AND generation = %s",
        (prefix, name),
    ).fetchall()
    return {kind: {"hits": hits, "calls": calls} for kind, hits, calls in rows}

"""Stored judgements of one generation against another (public.generation_judgements)."""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb

KEEP = 20  # judgements kept per pair of generations


def store(conn: psycopg.Connection, prefix: str, report: dict) -> None:
    with conn.transaction():
        conn.execute("INSERT INTO public.generation_judgements (topic_prefix, a, b, overall, report)"
                     " VALUES (%s, %s, %s, %s, %s)",
                     (prefix, report["a"], report["b"], Jsonb(report["overall"]), Jsonb(report)))
        conn.execute("DELETE FROM public.generation_judgements WHERE topic_prefix = %s AND a = %s AND b = %s"
                     " AND judged_at NOT IN (SELECT judged_at FROM public.generation_judgements"
                     " WHERE topic_prefix = %s AND a = %s AND b = %s ORDER BY judged_at DESC LIMIT %s)",
                     (prefix, report["a"], report["b"], prefix, report["a"], report["b"], KEEP))


def last(conn: psycopg.Connection, prefix: str, b: str | None = None, a: str | None = None) -> dict | None:
    """The newest judgement (of `b`, against `a`, when given): a, b, judged_at, overall."""
    row = conn.execute(
        "SELECT a, b, judged_at, overall FROM public.generation_judgements WHERE topic_prefix = %s"
        " AND (%s::text IS NULL OR b = %s) AND (%s::text IS NULL OR a = %s) ORDER BY judged_at DESC LIMIT 1",
        (prefix, b, b, a, a)).fetchone()
    return None if row is None else {"a": row[0], "b": row[1], "judged_at": row[2].isoformat(), "overall": row[3]}

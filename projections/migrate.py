"""Apply the versioned SQL migrations to a generation's schema, once, under a lock."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import resources

import psycopg

from core.settings import Settings

log = logging.getLogger(__name__)
_LOCK_ID = 0x6D656D  # pg_advisory_xact_lock key shared by every migrate run


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    found = []
    for entry in resources.files("projections.migrations").iterdir():
        if entry.name.endswith(".sql"):
            version, _, rest = entry.name.partition("_")
            found.append(Migration(int(version), rest.removesuffix(".sql"), entry.read_text()))
    return sorted(found, key=lambda m: m.version)


def render(sql: str, settings: Settings) -> str:
    """Fill the placeholders a migration may use from the settings."""
    return sql.replace("{{EMBEDDING_DIMENSIONS}}", str(int(settings.embedding.dimensions)))


def migrate(settings: Settings, schema: str | None = None) -> list[Migration]:
    """Bring `schema` (default: the settings' generation) up to date; return what was applied."""
    schema = schema or settings.pg_schema
    applied: list[Migration] = []
    with psycopg.connect(settings.postgres.dsn) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public")
            conn.execute(resources.files("projections").joinpath("control.sql").read_text())
            register_generation(conn, settings, schema)
            conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(psycopg.sql.Identifier(schema)))
            conn.execute(psycopg.sql.SQL("SET LOCAL search_path TO {}, public").format(psycopg.sql.Identifier(schema)))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            for migration in available_migrations():
                if migration.version in done:
                    continue
                conn.execute(render(migration.sql, settings))
                conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                log.info("applied migration %04d_%s to %s", migration.version, migration.name, schema)
                applied.append(migration)
    return applied


def register_generation(conn: psycopg.Connection, settings: Settings, schema: str) -> None:
    """Record the generation; the first one of a deployment serves reads."""
    name = schema.removeprefix("gen_")
    conn.execute(
        "INSERT INTO public.memory_generations (topic_prefix, name, replay_until) VALUES (%s, %s, %s)"
        " ON CONFLICT (topic_prefix, name) DO NOTHING",
        (settings.kafka.topic_prefix, name, settings.replay_until),
    )
    conn.execute(
        "UPDATE public.memory_generations SET is_active = true, status = 'active', activated_at = now()"
        " WHERE topic_prefix = %s AND name = %s AND NOT EXISTS ("
        "  SELECT 1 FROM public.memory_generations WHERE topic_prefix = %s AND is_active)",
        (settings.kafka.topic_prefix, name, settings.kafka.topic_prefix),
    )


def pending_migrations(conn: psycopg.Connection) -> list[int]:
    """Versions not yet applied in the connection's schema (for readiness checks)."""
    try:
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    except psycopg.errors.UndefinedTable:
        conn.rollback()
        done = set()
    return [m.version for m in available_migrations() if m.version not in done]

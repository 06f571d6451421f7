"""Apply the versioned SQL migrations to a generation's schema, once, under a lock."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from importlib import resources

import psycopg
from psycopg import sql

from core.settings import Settings

log = logging.getLogger(__name__)
_LOCK_ID = 0x6D656D  # pg_advisory_xact_lock key shared by every migrate run


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@cache
def _packaged_migrations() -> tuple[Migration, ...]:
    found = []
    for entry in resources.files("projections.migrations").iterdir():
        if entry.name.endswith(".sql"):
            version, _, rest = entry.name.partition("_")
            found.append(Migration(int(version), rest.removesuffix(".sql"), entry.read_text()))
    return tuple(sorted(found, key=lambda m: m.version))


def available_migrations() -> list[Migration]:
    """The packaged migrations in version order (read once per process: they ship with the code)."""
    return list(_packaged_migrations())


@cache
def _control_sql() -> str:
    return resources.files("projections").joinpath("control.sql").read_text()


def render(sql: str, settings: Settings) -> str:
    """Fill the placeholders a migration may use from the settings."""
    return sql.replace("{{EMBEDDING_DIMENSIONS}}", str(int(settings.embedding.dimensions)))


def migrate(settings: Settings, schema: str | None = None) -> list[Migration]:
    """Bring `schema` (default: the settings' generation) up to date; return what was applied.

    Three round trips inside one transaction: the prelude (lock, extension, control tables, the
    generation's row, schema and bookkeeping table), the applied versions, then every pending
    migration and its bookkeeping row as one script (a fresh generation's whole schema at once)."""
    schema = schema or settings.pg_schema
    with psycopg.connect(settings.postgres.dsn) as conn:
        with conn.transaction():
            conn.execute(prelude(settings, schema).as_string(conn))
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            pending = [m for m in available_migrations() if m.version not in done]
            if pending:
                try:
                    conn.execute(script(pending, settings).as_string(conn))
                except psycopg.Error as error:
                    failed = migration_at(pending, settings, error.diag.statement_position)
                    if failed is not None:
                        error.add_note(f"in migration {failed.version:04d}_{failed.name} (applied: none, rolled back)")
                    raise
    for migration in pending:
        log.info("applied migration %04d_%s to %s", migration.version, migration.name, schema)
    return pending


def prelude(settings: Settings, schema: str) -> sql.Composed:
    """What every run does before it reads the applied versions, as one statement list."""
    return sql.SQL("; ").join(
        [
            sql.SQL("SELECT pg_advisory_xact_lock({})").format(sql.Literal(_LOCK_ID)),
            sql.SQL("CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public"),
            sql.SQL(_control_sql()),
            *register_generation_statements(settings, schema),
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)),
            sql.SQL("SET LOCAL search_path TO {}, public").format(sql.Identifier(schema)),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ),
        ]
    )


def script(pending: list[Migration], settings: Settings) -> sql.Composed:
    """The pending migrations in order, then their bookkeeping rows in one INSERT."""
    rows = sql.SQL(", ").join(sql.SQL("({}, {})").format(sql.Literal(m.version), sql.Literal(m.name)) for m in pending)
    return sql.SQL(";\n").join(
        [
            *(sql.SQL(render(m.sql, settings)) for m in pending),
            sql.SQL("INSERT INTO schema_migrations (version, name) VALUES {}").format(rows),
        ]
    )


def register_generation_statements(settings: Settings, schema: str) -> list[sql.Composed]:
    """Record the generation; the first one of a deployment serves reads."""
    prefix, name = sql.Literal(settings.kafka.topic_prefix), sql.Literal(schema.removeprefix("gen_"))
    return [
        sql.SQL(
            "INSERT INTO public.memory_generations (topic_prefix, name, replay_until) VALUES ({}, {}, {})"
            " ON CONFLICT (topic_prefix, name) DO NOTHING"
        ).format(prefix, name, sql.Literal(settings.replay_until)),
        sql.SQL(
            "UPDATE public.memory_generations SET is_active = true, status = 'active', activated_at = now()"
            " WHERE topic_prefix = {} AND name = {} AND NOT EXISTS ("
            "  SELECT 1 FROM public.memory_generations WHERE topic_prefix = {} AND is_active)"
        ).format(prefix, name, prefix),
    ]


def migration_at(pending: list[Migration], settings: Settings, position: str | None) -> Migration | None:
    """The migration of `script` that holds 1-based character `position` (PostgreSQL's error
    position), so an error names its migration although they were sent as one script."""
    if not position:
        return None
    end = 0
    for migration in pending:
        end += len(render(migration.sql, settings)) + len(";\n")
        if int(position) <= end:
            return migration
    return None


def pending_migrations(conn: psycopg.Connection) -> list[int]:
    """Versions not yet applied in the connection's schema (for readiness checks)."""
    try:
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    except psycopg.errors.UndefinedTable:
        conn.rollback()
        done = set()
    return [m.version for m in available_migrations() if m.version not in done]

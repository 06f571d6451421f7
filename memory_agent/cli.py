"""The `memory-agent` command line: infra, migrate, worker, api, ingest, schemas, demo."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from memory_agent.cli_lazy import LazyGroup
from memory_agent.cli_logging import setup_logging

# Commands defined in other modules, imported only when run (`--help` stays fast: bench/cli_startup_bench.py):
# name -> (module:attribute, the one-line help `--help` lists; tests/unit/test_cli_startup.py checks it).
LAZY_COMMANDS = {
    "infra": ("infra.cli:infra", "Local single-node Kafka (KRaft) and PostgreSQL + pgvector under the state dir."),
    "replay": ("memory_agent.cli_generations:replay", "Rebuild all memory from the start of the log into a new generation."),
    "generations": ("memory_agent.cli_generations:generations", "Inspect, compare, switch and drop generations of the"
                    " read model."),
    "privacy": ("memory_agent.cli_privacy:privacy", "Master keys wrapping the per-user data keys of crypto-shredding."),
    "search": ("memory_agent.cli_memory:search", "Search memory by meaning (facts, conversation chunks, messages),"
               " scored like the turn-start context: final = similarity x importance weight x recency weight."),
    "store": ("memory_agent.cli_memory:store", "Store a memory by hand."),
    "list": ("memory_agent.cli_memory:list_cmd", "List my facts and the facts others shared with me (seed 003)."),
    "show": ("memory_agent.cli_memory:show", "Show one memory (fact) with its provenance and links."),
    "forget": ("memory_agent.cli_memory:forget", "Delete one of my memories (an event in the log: hidden"
               " everywhere, history kept)."),
    "export": ("memory_agent.cli_memory:export", "Export my memory as JSON Lines (facts with every version, chunks,"
               " summaries), each line with its provenance: source conversation, message range, event ids, dates."),
    "mcp": ("memory_agent.cli_memory:mcp", "Serve the memory as MCP tools: search_memory, store_memory,"
            " list_memories, forget_memory, get_turn_context."),
    "explain": ("memory_agent.cli_lineage:explain", "Explain a memory or a turn."),
}


def get_settings():
    """The process's settings (imported on use: pydantic is not needed for `--help`)."""
    from core.settings import get_settings as settings  # noqa: PLC0415

    return settings()


@click.group(cls=LazyGroup, lazy=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "--version", "-V", package_name="memory-agent", prog_name="memory-agent",
                      message="%(prog)s %(version)s")
def main() -> None:
    """Memory Agent: event-sourced conversation memory on Kafka and PostgreSQL."""


@main.command()
def migrate() -> None:
    """Apply the SQL migrations to this generation's schema and create the Kafka topics."""
    from projections.migrate import migrate as run_migrations
    from runtime.kafka_topics import ensure_topics

    settings = get_settings()
    setup_logging(settings.log_level)
    applied = run_migrations(settings)
    click.echo(f"schema {settings.pg_schema}: {len(applied)} migration(s) applied")
    import asyncio  # noqa: PLC0415 - imported on use: `--help` stays fast

    created = asyncio.run(ensure_topics(settings))
    click.echo(f"kafka: {len(created)} topic(s) created" + (f" ({', '.join(created)})" if created else ""))


@main.command()
@click.option("--role", type=click.Choice(["all", "agents", "stages", "projectors"]), default="all",
              show_default=True,
              help="all: folds, stages and projectors in one process; agents: the ordered folds (faust);"
                   " stages: summaries, extraction, embedding, compaction; projectors: PostgreSQL.")
@click.option("--projectors-only", is_flag=True, help="Same as --role projectors.")
def worker(role: str, projectors_only: bool) -> None:
    """Run the stream agents, stages and projectors (or one of them) until interrupted."""
    from memory_agent.worker import run_worker

    settings = get_settings()
    setup_logging(settings.log_level)
    if projectors_only and role not in ("all", "projectors"):
        raise click.UsageError(f"--projectors-only contradicts --role {role}")
    run_worker(settings, role="projectors" if projectors_only else role)


@main.command()
@click.option("--host", default=None, help="Defaults to MEMORY_API__HOST.")
@click.option("--port", type=int, default=None, help="Defaults to MEMORY_API__PORT.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes serving the port (defaults to MEMORY_API__WORKERS).")
def api(host: str | None, port: int | None, workers: int | None) -> None:
    """Serve the HTTP API (OpenAPI docs at /docs); each process loads the embedder before serving."""
    import uvicorn

    settings = get_settings()
    setup_logging(settings.log_level)
    uvicorn.run("memory_agent.cli:api_app", factory=True, host=host or settings.api.host,
                port=port or settings.api.port, workers=workers or settings.api.workers)


def api_app():
    """The app of one `memory-agent api` process (uvicorn imports it in each worker)."""
    from api.app import create_app

    settings = get_settings()
    setup_logging(settings.log_level)
    return create_app(settings, warm_up=True)


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tenant", default=None, help="Tenant for lines that do not name one (tenant_id).")
def ingest(file: Path, tenant: str | None) -> None:
    """Append the messages of a JSON Lines FILE to the log (with a progress bar).

    One JSON object per line, either a plain message:

    \b
      {"conversation_id": "c-1", "user_id": "alice", "seq": 0, "role": "user",
       "content": "We chose FastAPI.", "occurred_at": "2026-03-02T09:00:00Z"}

    \b
    required: conversation_id, user_id, seq (0-based, per conversation),
              role, content, and tenant_id unless --tenant is given;
    optional: subject_id, metadata (an object), occurred_at (ISO 8601 with
              a zone, else UTC; default: now), event_id (default: derived from
              tenant/conversation/seq/role/content, so running the same file
              again appends nothing twice)

    or a full event envelope (a line with "type"; `memory-agent schemas export`
    writes their JSON Schemas). Bad lines are reported with their line number
    and not sent; the rest are. Lines already stored (same seq, same event id)
    are counted as duplicates and not sent; a line whose seq already holds
    another message is refused. Exit status 1 if any line was refused.
    """
    from memory_agent.ingest import ingest_file

    settings = get_settings()
    setup_logging("WARNING")
    import asyncio  # noqa: PLC0415

    report = asyncio.run(ingest_file(settings, file, default_tenant=tenant))
    duplicates = f"{report.duplicates} already stored (not sent)" if report.checked_duplicates \
        else "duplicates not checked (read model unreachable)"
    click.echo(f"{report.lines} line(s): appended {report.appended} new, {duplicates},"
               f" refused {len(report.refused)}")
    for line_no, reason in report.refused[:50]:
        click.echo(f"  line {line_no}: {reason}", err=True)
    if len(report.refused) > 50:
        click.echo(f"  ... and {len(report.refused) - 50} more refused line(s)", err=True)
    if report.refused:
        sys.exit(1)


@main.group()
def schemas() -> None:
    """Event contracts."""


@schemas.command("export")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("schemas-out"),
              show_default=True, help="Directory to write the .json files into (created if missing).")
def export_cmd(out: Path) -> None:
    """Write one JSON Schema file per event type."""
    from schemas.export import export_schemas

    for path in export_schemas(out):
        click.echo(str(path))


@main.command()
@click.option("--api-url", default=None, help="Defaults to http://MEMORY_API__HOST:MEMORY_API__PORT.")
@click.option("--conversation", default="demo-conversation", show_default=True,
              help="Conversation id to append the sample to (running again appends nothing twice).")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds to wait for the memory systems before showing what there is.")
def demo(api_url: str | None, conversation: str, timeout: float) -> None:
    """Append a sample conversation (52 messages, 4 sessions, 4 subjects), wait until every
    memory system has worked on it, and print the summary chain, facts, topics and a
    turn-start context with retrieved memories. Needs a running worker and API (`make run`)."""
    from memory_agent.demo import run_demo

    settings = get_settings()
    setup_logging("WARNING")
    url = api_url or f"http://{settings.api.host}:{settings.api.port}"
    import asyncio  # noqa: PLC0415

    if not asyncio.run(run_demo(settings, url, conversation, timeout=timeout, say=click.echo)):
        sys.exit(1)



if __name__ == "__main__":
    main()

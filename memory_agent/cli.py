"""The `memory-agent` command line: infra, migrate, worker, api, ingest, schemas, demo."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import click

from memory_agent.settings import get_settings


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@click.group()
def main() -> None:
    """Memory Agent: event-sourced conversation memory on Kafka and PostgreSQL."""


try:  # the launchers need only the standard library and psycopg, but stay optional
    from infra.cli import infra

    main.add_command(infra)
except ImportError:  # pragma: no cover
    pass


from memory_agent.cli_generations import generations, replay  # noqa: E402

main.add_command(replay)
main.add_command(generations)


@main.command()
def migrate() -> None:
    """Apply the SQL migrations to this generation's schema and create the Kafka topics."""
    from projections.migrate import migrate as run_migrations
    from streams.topics import ensure_topics

    settings = get_settings()
    _setup_logging(settings.log_level)
    applied = run_migrations(settings)
    click.echo(f"schema {settings.pg_schema}: {len(applied)} migration(s) applied")
    created = asyncio.run(ensure_topics(settings))
    click.echo(f"kafka: {len(created)} topic(s) created" + (f" ({', '.join(created)})" if created else ""))


@main.command()
@click.option("--projectors-only", is_flag=True, help="Run only the projectors (no stream agents).")
def worker(projectors_only: bool) -> None:
    """Run the stream agents and projectors until interrupted."""
    from memory_agent.worker import run_worker

    settings = get_settings()
    _setup_logging(settings.log_level)
    run_worker(settings, projectors_only=projectors_only)


@main.command()
@click.option("--host", default=None, help="Defaults to MEMORY_API__HOST.")
@click.option("--port", type=int, default=None, help="Defaults to MEMORY_API__PORT.")
def api(host: str | None, port: int | None) -> None:
    """Serve the HTTP API (OpenAPI docs at /docs)."""
    import uvicorn

    from api.app import create_app

    settings = get_settings()
    _setup_logging(settings.log_level)
    uvicorn.run(create_app(settings), host=host or settings.api.host, port=port or settings.api.port)


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tenant", default=None, help="Tenant for lines that do not name one.")
def ingest(file: Path, tenant: str | None) -> None:
    """Append the messages of a JSON Lines file to the log (with a progress bar)."""
    from memory_agent.ingest import ingest_file

    settings = get_settings()
    report = asyncio.run(ingest_file(settings, file, default_tenant=tenant))
    click.echo(f"appended {report.appended}, refused {len(report.refused)} of {report.lines} line(s)")
    for line_no, reason in report.refused[:20]:
        click.echo(f"  line {line_no}: {reason}", err=True)
    if report.refused:
        sys.exit(1)


@main.group()
def schemas() -> None:
    """Event contracts."""


@schemas.command("export")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("schemas-out"))
def export_cmd(out: Path) -> None:
    """Write one JSON Schema file per event type."""
    from schemas.export import export_schemas

    for path in export_schemas(out):
        click.echo(str(path))


@main.command()
@click.option("--api-url", default=None, help="Defaults to http://MEMORY_API__HOST:MEMORY_API__PORT.")
@click.option("--conversation", default="demo-conversation")
def demo(api_url: str | None, conversation: str) -> None:
    """Ingest the sample conversation and print its turn-start context."""
    from memory_agent.demo import run_demo

    settings = get_settings()
    url = api_url or f"http://{settings.api.host}:{settings.api.port}"
    asyncio.run(run_demo(settings, url, conversation))


if __name__ == "__main__":
    main()

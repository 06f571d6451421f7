"""`memory-agent infra up|down|status`: the local Kafka and PostgreSQL, with no Docker."""

from __future__ import annotations

import logging
from collections.abc import Callable

import click

from infra import launcher, state
from infra.process import InfraError, ServiceStatus
from core.settings import Settings, get_settings


@click.group()
def infra() -> None:
    """Local single-node Kafka (KRaft) and PostgreSQL + pgvector under the state dir."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # Our own progress lines are enough; the Kafka client's retries are noise here.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


@infra.command()
def up() -> None:
    """Start both services (idempotent: running ones are left alone)."""
    result = _run(launcher.up)
    for service in result.services:
        click.echo(_line(service))
    settings = get_settings()
    click.echo(f"\nMEMORY_KAFKA__BOOTSTRAP_SERVERS={settings.kafka.bootstrap_servers}")
    click.echo(f"MEMORY_POSTGRES__DSN={settings.postgres.dsn}")


@infra.command()
def down() -> None:
    """Stop both services; data stays in the state dir."""
    for service in _run(launcher.down).services:
        click.echo(_line(service))


@infra.command()
def status() -> None:
    """Show whether each service runs, with pid, address and log file. Exit 1 if not all run."""
    result = _run(launcher.status)
    for service in result.services:
        click.echo(_line(service))
    where = state.layout(get_settings())
    click.echo(f"\nstate dir: {where.state_dir} (MEMORY_STATE_DIR; `memory-agent infra purge` removes it)")
    click.echo(f"kafka data: {where.kafka_data}\npostgres data: {where.postgres_data}")
    for path in where.outside:
        click.echo(f"outside the state dir (an earlier launcher's cluster, purge removes it): {path}")
    if not result.all_running:
        raise SystemExit(1)


@infra.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(yes: bool) -> None:
    """Stop both services and delete everything of this deployment: Kafka's and PostgreSQL's data,
    logs, the worker's tables and replay files under the state dir (other files there are kept)."""
    settings = get_settings()
    where = state.layout(settings)
    targets = ", ".join(str(p) for p in (where.state_dir, *where.outside))
    if not yes:
        click.confirm(f"Delete every topic, database and log of this deployment ({targets})?", abort=True)
    _run(launcher.down)
    removed, kept = state.purge(settings)
    for path in removed:
        click.echo(f"removed {path}")
    for path in kept:
        click.echo(f"kept {path} (not written by memory-agent)")
    if not removed:
        click.echo(f"nothing to remove under {where.state_dir}")


def _run(action: Callable[[Settings], launcher.InfraStatus]) -> launcher.InfraStatus:
    try:
        return action(get_settings())
    except InfraError as exc:
        raise click.ClickException(str(exc)) from exc


def _line(service: ServiceStatus) -> str:
    if not service.running:
        return f"{service.name:<9} stopped   {service.address:<16} log: {service.log_file}"
    how = f"started in {service.seconds:.1f}s" if service.started else "already running"
    return (
        f"{service.name:<9} running   {service.address:<16} pid {service.pid:<8} "
        f"{how:<18} log: {service.log_file}"
    )


if __name__ == "__main__":
    infra()

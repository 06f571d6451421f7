"""`memory-agent privacy`: master keys of the data keys (docs/security.md, "Data keys at rest")."""

from __future__ import annotations

import click

from memory_agent.cli_logging import setup_logging
from core.settings import get_settings


@click.group()
def privacy() -> None:
    """Master keys wrapping the per-user data keys of crypto-shredding."""


@privacy.command("new-master-key")
def new_master_key() -> None:
    """Print a new master key (base64 of 32 random bytes) to put under a new id."""
    from core.master_keys import new_master_key as make  # noqa: PLC0415

    click.echo(make())


@privacy.command()
def check() -> None:
    """Unwrap one data key per master key id of this deployment; exit 1 naming what is wrong."""
    from core import privacy as keys  # noqa: PLC0415
    from core.master_keys import MasterKeyError  # noqa: PLC0415

    settings = get_settings()
    setup_logging(settings.log_level)
    try:
        counts = keys.key_store(settings).check()
    except MasterKeyError as error:
        raise click.ClickException(str(error)) from None
    for master_id, count in sorted(counts.items()):
        click.echo(f"{count} live data keys wrapped by {master_id!r}" if master_id
                   else f"{count} live data keys stored WITHOUT a master key (run: memory-agent privacy rewrap)")


@privacy.command()
def rewrap() -> None:
    """Wrap every live data key of this deployment with the current master key
    (MEMORY_PRIVACY__MASTER_KEY_ID), unwrapping with whichever configured key wrapped it."""
    from core import privacy as keys  # noqa: PLC0415
    from core.master_keys import MasterKeyError  # noqa: PLC0415

    settings = get_settings()
    setup_logging(settings.log_level)
    store = keys.key_store(settings)
    try:
        done = store.rewrap()
    except MasterKeyError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"{done} data keys re-wrapped with master key {store.master.current!r}")

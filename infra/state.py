"""Where a deployment's local state lives, and `infra purge`: removing all of it."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from core.settings import Settings
from infra import kafka, postgres

# What the project writes under MEMORY_STATE_DIR: the launcher's services, `make run`'s and the
# replays' logs, the worker's faust tables, replay pid files, benchmark caches.
KNOWN_ENTRIES = ("kafka", "postgres", "logs", "faust", "replays", "bench")


@dataclass(frozen=True)
class StateLayout:
    state_dir: Path
    kafka_data: Path
    postgres_data: Path
    # A cluster an earlier launcher made as root outside the state dir (purge removes it too).
    outside: tuple[Path, ...]


def layout(settings: Settings) -> StateLayout:
    pg = postgres.PostgresConfig.from_settings(settings)
    outside = (pg.cluster_dir,) if pg.cluster_dir.exists() else ()
    return StateLayout(settings.state_dir.resolve(), kafka.KafkaConfig.from_settings(settings).data, pg.data, outside)


def purge(settings: Settings) -> tuple[list[Path], list[Path]]:
    """Remove everything the project wrote for this deployment (the services must be stopped):
    the known entries of the state dir, the state dir itself when nothing else is left in it, and
    an earlier launcher's cluster outside it. Returns (removed, kept: unknown entries left alone)."""
    where = layout(settings)
    removed: list[Path] = []
    for path in [where.state_dir / name for name in KNOWN_ENTRIES] + list(where.outside):
        if path.is_symlink() or path.is_file():
            path.unlink()
            removed.append(path)
        elif path.exists():
            shutil.rmtree(path)
            removed.append(path)
    kept = sorted(where.state_dir.iterdir()) if where.state_dir.is_dir() else []
    if where.state_dir.is_dir() and not kept:
        where.state_dir.rmdir()
        removed.append(where.state_dir)
    return removed, kept

"""The judge's plumbing (issue 26): its options, its pacing to a share of one core, and the
settings a generation reads with. The reads themselves: api/judge.py."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from core.settings import Settings


@dataclass(frozen=True)
class Options:
    sample: int | None = None  # judge this many recorded turns (a stable sample), None: all
    since: datetime | None = None  # only turns served at or after this time
    horizon: int = 20  # messages of the continuation (the reply and the ones after it)
    cpu_share: float = 0.5  # of one core, for the judge's own process (Pacer)
    margin: float = 0.01  # |delta| within this is "same" (and passes the gate)


class Pacer:
    """Duty cycle: after each turn that took `busy` seconds, wait busy x (1 - share) / share, so
    the judge's process uses at most `share` of one core (it runs one turn at a time, and
    PostgreSQL works for it only while it waits); share >= 1: no waiting."""

    def __init__(self, share: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.share, self.clock = share, clock
        self.waited = 0.0

    def pause_after(self, busy: float) -> float:
        if self.share >= 1 or busy <= 0:
            return 0.0
        return busy * (1 - self.share) / max(self.share, 0.01)

    async def run(self, work):
        started = self.clock()
        result = await work
        pause = self.pause_after(self.clock() - started)
        if pause:
            self.waited += pause
            await asyncio.sleep(pause)
        return result


def settings_with(base: Settings, overrides: dict[str, str]) -> Settings:
    """`base` with `MEMORY_SECTION__KEY=value` overrides applied (a generation's recorded `--set`
    overrides: its read-side settings, e.g. retrieval.*, apply to its reads), validated as the
    environment would be (JSON for lists and objects). Other variables are ignored."""
    data = base.model_dump()
    for key, value in overrides.items():
        if not key.startswith("MEMORY_"):
            continue
        *sections, name = key[len("MEMORY_"):].lower().split("__")
        node = data
        for section in sections:
            node = node.get(section)
            if not isinstance(node, dict):
                raise ValueError(f"{key}: no settings section {section!r}")
        node[name] = json.loads(value) if value[:1] in "[{" else value
    return type(base)(**data)

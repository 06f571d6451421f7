"""The worker process: projectors (and, with them, the stream agents) until stopped."""

from __future__ import annotations

import asyncio
import logging
import signal

from memory_agent.settings import Settings
from projections.messages import MessagesProjector
from projections.runner import ProjectorRunner
from streams.topics import ensure_topics

log = logging.getLogger(__name__)


def projectors(settings: Settings) -> list:
    return [MessagesProjector(settings)]


async def run_projectors(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run every projector until `stop` is set or a signal arrives."""
    await ensure_topics(settings)
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    runners = [ProjectorRunner(settings, p) for p in projectors(settings)]
    tasks = [asyncio.create_task(r.run(), name=f"projector-{r.projector.name}") for r in runners]
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()
    for task in done:
        if task is not stopper and task.exception():
            raise task.exception()


def run_worker(settings: Settings, *, projectors_only: bool = False) -> None:
    """Entry point of `memory-agent worker`."""
    asyncio.run(run_projectors(settings))

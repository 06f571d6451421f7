"""Faust wiring of this memory system (filled in by its issue)."""

from __future__ import annotations

import faust

from streams.context import StreamContext


def register(app: faust.App, ctx: StreamContext) -> None:
    """Add this system's agents, tables and timers to the app."""

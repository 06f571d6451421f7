"""Projector(s) of this memory system's events into PostgreSQL (filled in by its issue)."""

from __future__ import annotations

from memory_agent.settings import Settings


def projectors(settings: Settings) -> list:
    """The projectors this system runs in the worker."""
    return []

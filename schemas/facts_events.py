"""Events of the facts, chunks and semantic-memory system (seeds 001, 003)."""

from __future__ import annotations

from schemas.spec import EventSpec

SPECS: tuple[EventSpec, ...] = ()

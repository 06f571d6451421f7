"""Events of the topic memory system (seed 004)."""

from __future__ import annotations

from schemas.spec import EventSpec

SPECS: tuple[EventSpec, ...] = ()

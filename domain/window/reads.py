"""What the window summary stage reads from the read model, as a port (no SQL in streams/).

The stage (streams/window/summarize.py) asks, per summary request, within one session (one
connection checkout, as before the port): is this request settled already, the base summary's
status and text, the window's projected messages, and how many of its seqs are erasure gaps.
The PostgreSQL implementation is `projections/window_reads.py`, wired by the roof
(memory_agent/worker.py) into the app (`streams.app.make_app(ports=...)`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class SettledRow:
    """What the memory projection holds of a request (its memory row)."""

    status: str
    attempt: int
    text: str | None
    generation_time_ms: int | None
    prompt_version: str
    model: str
    source_event_ids: list[str] | None
    error: str | None


# (seq, event_id, role, content, occurred_at) of a projected message, in seq order.
MessageRow = tuple[int, str, str, str, datetime]


class WindowReadSession(Protocol):
    async def settled(self, tenant_id: str, conversation_id: str, memory_id: int) -> SettledRow | None:
        """The memory row of `memory_id`, or None when the projection has none yet."""

    async def base(self, tenant_id: str, conversation_id: str, memory_id: int) -> tuple[str, str | None] | None:
        """(status, text) of a base summary's memory row, or None."""

    async def messages(self, tenant_id: str, conversation_id: str, first_seq: int, last_seq: int) -> list[MessageRow]:
        """The projected messages first_seq..last_seq."""

    async def erased_seqs(self, tenant_id: str, conversation_id: str, first_seq: int, last_seq: int) -> int:
        """How many seqs of first_seq..last_seq an erasure removed (gaps, not waits: docs/lineage.md)."""


class WindowReads(Protocol):
    def session(self) -> AbstractAsyncContextManager[WindowReadSession]:
        """One session (one connection) for a request's reads."""


# The roof's factory: the stage's connection pool -> the reads on it.
WindowReadsFactory = Callable[[Any], WindowReads]

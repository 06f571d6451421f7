"""What the erasure check and the re-derive sender read from the read model, as ports (no SQL
in streams/).

- `ErasureReads`: the topic fold's erasure check (streams/topics_memory/erased.py) on a
  connection of its own: the applied erasures' count (their version: the table is insert-only),
  all of them, and a projector's positions (a stream replay's barrier).
- `RederiveReads`: the re-derive sender (streams/rederive.py): the pending rows of
  `erasure_rederive`, taken in one transaction (one session) and marked sent or done in it.

The PostgreSQL implementations are in `projections/erasure_reads.py`, wired by the roof
(memory_agent/worker.py, the batch replay) into the app (`streams.app.make_app(ports=...)`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from domain.erasure import AppliedErasure


class ReadsUnavailable(Exception):
    """The read model does not answer (an operational error: the server restarts, the connection
    broke). The caller waits and asks again; the port has dropped its connection."""


class ErasureReads(Protocol):
    async def count(self) -> int:
        """How many erasures are applied (the table's version)."""

    async def applied(self) -> tuple[int, list[AppliedErasure]]:
        """(count, every applied erasure) read at one moment."""

    async def projector_offsets(self, projector: str, topic: str) -> dict[int, int]:
        """{partition: next offset} a projector has committed for a topic."""

    async def close(self) -> None:
        """Release the connection (a later call opens a new one)."""


# The roof's factory: the settings -> the check's reads (a connection of their own).
ErasureReadsFactory = Callable[[Any], ErasureReads]


@dataclass(frozen=True)
class PendingRederive:
    """A committed `erasure_rederive` row not done yet."""

    erasure_event_id: str
    tenant_id: str
    conversation_id: str
    erased_seqs: list[int]
    base_memory_id: int | None
    base_end_seq: int | None
    chunk_ranges: list[tuple[int, int]]
    attempts: int
    sent_at: datetime | None


class RederiveSession(Protocol):
    async def pending(self) -> list[PendingRederive]:
        """The oldest rows not done, locked for this session (others skip them)."""

    async def recorded_ranges(self, tenant_id: str, conversation_id: str) -> set[tuple[int, int]]:
        """The (start, end) ranges of the conversation's projected chunks."""

    async def with_messages(self, tenant_id: str, conversation_id: str,
                            ranges: list[tuple[int, int]]) -> set[tuple[int, int]]:
        """The ranges (start, end exclusive) that still hold a projected message."""

    async def now(self) -> datetime:
        """The read model's clock (the rows' `sent_at` is on it)."""

    async def sent(self, erasure_event_id: str, conversation_id: str) -> None:
        """One more attempt sent now."""

    async def done(self, erasure_event_id: str, conversation_id: str, outcome: str) -> None:
        """Nothing is left to do for the row."""


class RederiveReads(Protocol):
    def session(self) -> AbstractAsyncContextManager[RederiveSession]:
        """One transaction: what it marks is committed when it ends without an error."""


RederiveReadsFactory = Callable[[Any], RederiveReads]

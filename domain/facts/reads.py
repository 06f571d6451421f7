"""What the chunk stage reads from the read model, as a port (no SQL in streams/).

The stage (streams/facts/stage.py) asks per chunk request: is the range recorded already, the
range's projected inputs (the conversation, its messages, its erased seqs: one session per
poll), and the owner's current facts related to the chunk. The PostgreSQL implementation is
`projections/chunk_reads.py`, wired by the roof (memory_agent/worker.py, the batch replay) into
the app (`streams.app.make_app(ports=...)`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

# (user_id, subject_id, last_seq) of the projected conversation.
ConversationRow = tuple[str, str | None, int]
# (seq, event_id, role, content, occurred_at) of a projected message, in seq order.
MessageRow = tuple[int, str, str, str, datetime]
# (fact_id, content, category) of a stored fact.
FactRow = tuple[str, str, str]


@dataclass(frozen=True)
class RangeRows:
    """What the projection holds of a range start..end-1 at one moment (one session)."""

    conversation: ConversationRow | None
    messages: list[MessageRow]
    erased: int  # seqs of the range never projected because their erasure came first


class ChunkReads(Protocol):
    async def recorded(self, tenant_id: str, conversation_id: str, start: int, end: int) -> bool:
        """Whether the chunk of start..end-1 is projected already (a redelivered request)."""

    async def range_rows(self, tenant_id: str, conversation_id: str, start: int, end: int) -> RangeRows:
        """The conversation and the range's projected messages; the erased count is read only
        when messages are missing (0 otherwise)."""

    async def related(self, tenant_id: str, owner_user_id: str, subject_id: str | None, query: str, limit: int,
                      before: datetime) -> list[FactRow]:
        """The owner's current facts of the subject valid before `before` that match the full-text
        `query` (an OR of words), best ranked first, at most `limit`."""


# The roof's factory: the stage's connection pool -> the reads on it.
ChunkReadsFactory = Callable[[Any], ChunkReads]

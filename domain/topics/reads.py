"""What the topic compaction stage reads from the read model, as a port (no SQL in streams/).

The PostgreSQL implementation is `projections/topic_reads.py`, wired by the roof
(memory_agent/worker.py) into the app (`streams.app.make_app(ports=...)`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol


class TopicReads(Protocol):
    async def compaction(self, tenant_id: str, conversation_id: str,
                         topic_id: str) -> tuple[int, str | None, str | None, str | None] | None:
        """The topic's projected compaction: (summary_upto_seq, summary, model, prompt version), or
        None when the projection has no row of the topic."""

    async def messages(self, tenant_id: str, conversation_id: str, seqs: Sequence[int]) -> list[tuple[int, str, str]]:
        """(seq, role, content) of the projected messages among `seqs`, in seq order."""


# The roof's factory: the stage's connection pool -> the reads on it.
TopicReadsFactory = Callable[[Any], TopicReads]

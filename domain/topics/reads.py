"""What the topic compaction and backlog stages read from the read model, as a port (no SQL in streams/).

The PostgreSQL implementation is `projections/topic_reads.py`, wired by the roof
(memory_agent/worker.py) into the app (`streams.app.make_app(ports=...)`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
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


# (seq, role, content, occurred_at, user_id, subject_id, metadata) of a projected message.
RecallRow = tuple[int, str, str, datetime, str, str | None, dict[str, Any]]


class BacklogReadSession(Protocol):
    async def rows(self, tenant_id: str, conversation_id: str, from_seq: int, upto_seq: int,
                   limit: int) -> list[RecallRow]:
        """The projected messages from_seq..upto_seq in seq order, at most `limit`."""

    async def gap_rows(self, tenant_id: str, conversation_id: str, ranges: Sequence[tuple[int, int]],
                       limit: int) -> list[RecallRow]:
        """The projected messages within the (first, last) ranges in seq order, at most `limit`."""

    async def newest(self, tenant_id: str, conversation_id: str) -> int | None:
        """The conversation's highest seq projected or left out as erased, or None."""


class BacklogReads(Protocol):
    """The topic backlog (recall) stage's reads (streams/topics_memory/recall.py)."""

    def session(self) -> AbstractAsyncContextManager[BacklogReadSession]:
        """One session (one connection) for one poll of a read."""


BacklogReadsFactory = Callable[[Any], BacklogReads]

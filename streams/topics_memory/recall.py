"""The backlog stage: deferred messages read back from the projected log, embedded in one
batch, and sent to the topic fold in order (topic.backlog_requested -> message_recalled...,
backlog_read). The fold's inbox holds a bounded number of messages; this is where the rest
come from, so nothing is ever given up because of a backlog."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from domain.topics.gaps import missing_in
from domain.topics.reads import BacklogReads
from core.embeddings.port import Embedder, EmbeddingError
from schemas import topic_events as te
from schemas.codec import Event, new_event
from schemas.envelope import Envelope

log = logging.getLogger(__name__)

PLACED_ROLES = ("user", "assistant")


@dataclass(frozen=True)
class Row:
    seq: int
    role: str
    content: str
    occurred_at: datetime
    user_id: str
    subject_id: str | None
    metadata: dict[str, Any]


def _importance(metadata: dict[str, Any]) -> float | None:
    value = metadata.get("importance") if isinstance(metadata, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return min(1.0, max(0.0, float(value)))
    return None


def complete(rows: list[Row], request: te.TopicBacklogRequested, newest: int | None = None) -> bool:
    """The projection holds all it ever will of the range asked for: `limit` rows, or the last
    seq asked for, or a later seq of the conversation (`newest`: the highest seq projected or
    left out as erased, `erased_messages`: the messages projector applies a conversation's
    messages in log order, and an erased seq is a gap, not a wait, as for the summary and chunk
    stages)."""
    return (len(rows) >= request.limit or (bool(rows) and rows[-1].seq >= request.upto_seq)
            or (newest is not None and newest >= request.upto_seq))


class BacklogStage:
    def __init__(self, embedder: Embedder, reads: BacklogReads, *, inputs_wait_s: float = 30.0,
                 gap_wait_s: float = 5.0) -> None:
        self.embedder = embedder
        self.reads = reads  # the projected log (domain/topics/reads.py; projections/topic_reads.py)
        self.inputs_wait_s = inputs_wait_s
        self.gap_wait_s = gap_wait_s  # a gap read is asked long after its seqs: a short wait, then the fold re-asks

    async def handle(self, event: Event) -> list[Envelope]:
        request: te.TopicBacklogRequested = event.payload
        cause = event.envelope
        if request.ranges:
            return await self._gap(cause, request)
        rows = await self._rows(cause, request)
        if rows is None:  # not projected yet: the fold asks again after its embedding timeout
            log.warning("backlog of %s from seq %d: messages not projected yet (attempt %d)",
                        cause.conversation_id, request.from_seq, request.attempt)
            return []
        through = rows[-1].seq if len(rows) >= request.limit else request.upto_seq
        missing = 0 if complete(rows, request) else 1  # a final read going on with a gap (or an erased seq)
        return await self._answer(cause, request, rows, through, missing, gap=False)

    async def _answer(self, cause: Envelope, request: te.TopicBacklogRequested, rows: list[Row], through: int,
                      missing: int, *, gap: bool) -> list[Envelope]:
        """The rows' people's messages recalled in order with their embeddings, then the read's
        `topic.backlog_read`; nothing (asked again later) while embedding fails before the last attempt."""
        placed = [r for r in rows if r.role in PLACED_ROLES]
        vectors, error = await self._embed([r for r in placed if r.role == "user"])
        if vectors is None and not request.final:
            log.warning("%s of %s from seq %d: embedding failed (%s); asked again later",
                        "gap read" if gap else "backlog", cause.conversation_id, request.from_seq, error)
            return []
        out, after = [], request.from_seq - 1
        for row in placed:
            out.append(self._recalled(cause, row, after, vectors, error))
            after = row.seq
        done = te.TopicBacklogRead(from_seq=request.from_seq, through_seq=through, last_recalled_seq=after,
                                   count=len(placed), attempt=request.attempt, missing=missing, gap=gap)
        out.append(new_event(te.TOPIC_BACKLOG_READ, done, tenant_id=cause.tenant_id,
                             conversation_id=cause.conversation_id, user_id=cause.user_id,
                             subject_id=cause.subject_id, seq=cause.seq))
        return out

    async def _gap(self, cause: Envelope, request: te.TopicBacklogRequested) -> list[Envelope]:
        """Seqs the fold passed over, read back: the rows of the ranges the projection holds,
        then a `topic.backlog_read` (gap) saying through which seq the log was looked at and
        how many seqs of the ranges it did not hold (the fold gives those up)."""
        ranges = tuple((int(first), int(last)) for first, last in request.ranges or ())
        rows = await self._gap_rows(cause, request, ranges)
        if rows is None:
            log.info("gap read of %s seq %d-%d: projection not past it yet (attempt %d)",
                     cause.conversation_id, request.from_seq, request.upto_seq, request.attempt)
            return []
        through = rows[-1].seq if len(rows) >= request.limit else request.upto_seq
        missing = missing_in(ranges, through, len(rows))
        if missing:
            log.warning("gap read of %s seq %d-%d: %d passed-over seqs are not in the projected log; given up",
                        cause.conversation_id, request.from_seq, through, missing)
        return await self._answer(cause, request, rows, through, missing, gap=True)

    async def _gap_rows(self, cause: Envelope, request: te.TopicBacklogRequested,
                        ranges: tuple[tuple[int, int], ...]) -> list[Row] | None:
        """The ranges' rows once the projection is past them (or on the final attempt, what is there)."""
        deadline = time.monotonic() + self.gap_wait_s
        while True:
            async with self.reads.session() as read:
                rows = [Row(*r) for r in await read.gap_rows(cause.tenant_id, cause.conversation_id, ranges,
                                                             request.limit)]
                newest = await read.newest(cause.tenant_id, cause.conversation_id)
            if complete(rows, request, newest):
                return rows
            if time.monotonic() >= deadline:
                return rows if request.final else None
            await asyncio.sleep(0.2)

    async def _rows(self, cause: Envelope, request: te.TopicBacklogRequested) -> list[Row] | None:
        """The range from the projected log; None while it is incomplete (the final attempt
        takes what is there after the wait, and says so in the log)."""
        deadline = time.monotonic() + self.inputs_wait_s
        while True:
            async with self.reads.session() as read:
                rows = [Row(*r) for r in await read.rows(cause.tenant_id, cause.conversation_id, request.from_seq,
                                                         request.upto_seq, request.limit)]
                newest = None
                if not complete(rows, request):
                    newest = await read.newest(cause.tenant_id, cause.conversation_id)
            if complete(rows, request, newest):
                return rows
            if time.monotonic() >= deadline:
                if request.final:
                    log.error("backlog of %s seq %d-%d: only %d messages projected after %.0fs; going on without "
                              "the rest", cause.conversation_id, request.from_seq, request.upto_seq, len(rows),
                              self.inputs_wait_s)
                    return rows
                return None
            await asyncio.sleep(0.1)

    async def _embed(self, users: list[Row]) -> tuple[list[np.ndarray | None] | None, str | None]:
        """One embedding call for the read's user messages (unit vectors; None for a zero one)."""
        if not users:
            return [], None
        try:
            raw = await self.embedder.embed_documents([r.content for r in users])
        except EmbeddingError as exc:
            return None, str(exc)
        except Exception as exc:  # noqa: BLE001 - a model crash must not stop the stage
            log.exception("embedding a backlog of %d messages crashed", len(users))
            return None, f"{type(exc).__name__}: {exc}"
        vectors: list[np.ndarray | None] = []
        for vector in raw:
            norm = float(np.linalg.norm(vector))
            vectors.append(vector / norm if np.isfinite(norm) and norm > 0.0 else None)
        return vectors, None

    def _recalled(self, cause: Envelope, row: Row, after: int, vectors: list | None, error: str | None) -> Envelope:
        embedding, why = None, None
        if row.role == "user":
            vector = vectors.pop(0) if vectors else None
            if vector is not None:
                embedding = [round(x, 7) for x in vector.tolist()]
            else:
                why = f"embedding failed: {error}" if error else "the embedding is zero or not finite"
        payload = te.TopicMessageRecalled(
            seq=row.seq, after_seq=after, role=row.role, content=row.content, occurred_at=row.occurred_at,
            importance=_importance(row.metadata), embedding=embedding,
            model=self.embedder.model if embedding is not None else None, error=why,
        )
        return new_event(te.TOPIC_MESSAGE_RECALLED, payload, tenant_id=cause.tenant_id,
                         conversation_id=cause.conversation_id, user_id=row.user_id, subject_id=row.subject_id,
                         seq=row.seq)

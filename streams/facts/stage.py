"""The concurrent stage: chunk.requested -> gate + extraction + embeddings -> chunk.recorded/failed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

from core import metrics
from core.embeddings.port import Embedder, EmbeddingError
from core.llm.port import ChatMessage, LlmError
from schemas import facts_events as fe
from schemas.codec import Event, encode, new_event
from schemas.envelope import Envelope
from domain.facts import ids
from domain.facts.reads import ChunkReads
from streams.facts.extraction import MalformedExtraction
from streams.facts.extractor import ChunkExtractor, Extraction
from streams.facts.offline import ExistingFact, pick_related, related_query

log = logging.getLogger(__name__)


_RECENT_FACTS = 50  # per conversation
_RECENT_CONVERSATIONS = 2000


class InputsNotReady(Exception):
    """The projection has not caught up with the chunk's messages."""


@dataclass(frozen=True)
class ChunkInputs:
    owner_user_id: str
    subject_id: str | None
    messages: list[ChatMessage]
    event_ids: list[str]
    observed_at: datetime
    occurred_start: datetime


class Turns:
    """One request of a conversation at a time, in the order the requests arrived.

    The chunk fold asks for ranges ahead of the one in flight (`ChunkConfig.max_ahead`); each is
    extracted after the one before it, so it sees that range's facts (`_recent`) as it did when
    the fold asked for one range at a time. The stage runner starts a partition's requests in log
    order, and each takes its turn before it first waits on anything; asyncio.Lock serves waiters
    first come, first served. `limit` bounds the conversations extracting at once (the LLM's
    concurrency), so requests waiting for their turn do not count against it."""

    def __init__(self, limit: int) -> None:
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._users: dict[tuple[str, str], int] = {}
        self._limit = asyncio.Semaphore(limit)

    @contextlib.asynccontextmanager
    async def turn(self, key: tuple[str, str]):
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock, self._limit:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._locks[key]


class ChunkStage:
    """Computes one requested chunk; never blocks the ordered chunk fold. Every failure becomes a
    chunk.failed event and leaves no state behind: the fold retries the same range later. A
    conversation's requests are computed one after another, in order (`Turns`)."""

    def __init__(self, extractor: ChunkExtractor, embedder: Embedder, reads: ChunkReads, *,
                 inputs_wait_s: float = 30.0, max_event_bytes: int = 512 * 1024, related_facts: int = 12,
                 concurrency: int = 8) -> None:
        self.turns = Turns(concurrency)
        self.extractor = extractor
        self.embedder = embedder
        self.reads = reads  # the read model (domain/facts/reads.py; projections/chunk_reads.py)
        self.inputs_wait_s = inputs_wait_s
        self.max_event_bytes = max_event_bytes
        self.related_facts = related_facts
        # The facts of each conversation's latest chunks, newest conversations last.
        self._recent: OrderedDict[tuple[str, str], list[ExistingFact]] = OrderedDict()

    async def handle(self, event: Event) -> Envelope | None:
        """The result event for a request, or None when its range is already recorded and the
        request is a first attempt (a redelivery: its chunk.recorded is in the log already, on
        its way to the fold).

        A re-issued request (attempt > 1) for a recorded range is computed and answered again:
        the fold re-issues only when no result reached it within its timeout, so it never got the
        one in the log (e.g. a worker stopped between recording a chunk and folding its result).
        Answered with nothing, the fold re-issued the range until its attempts ran out and then
        skipped it: a worker restarted mid-request resumed after max_attempts timeouts (5 x 30 s
        in tests/integration/test_upgrade.py) instead of one. The projector and the fold ignore the
        second chunk.recorded of a range; it costs one model call, on a re-issue only."""
        async with self.turns.turn((event.envelope.tenant_id, event.envelope.conversation_id)):
            return await self._handle(event)

    async def _handle(self, event: Event) -> Envelope | None:
        request: fe.ChunkRequested = event.payload
        cause = event.envelope
        if await self._already_recorded(cause, request):
            if request.attempt <= 1:
                log.debug("chunk %s-%s of %s already recorded", request.start_seq, request.end_seq_exclusive,
                          cause.conversation_id)
                return None
            log.info("chunk %s-%s of %s already recorded, re-issued (attempt %d): answered again for the fold",
                     request.start_seq, request.end_seq_exclusive, cause.conversation_id, request.attempt)
        started = time.monotonic()
        try:
            inputs = await self._inputs(cause, request)
            existing = await self._related(cause, inputs)
            extraction = await self.extractor.extract(inputs.messages, existing)
            result = await self._recorded(cause, request, inputs, extraction, started)
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the fold, never lost
            kind = type(exc).__name__
            metrics.LLM_LATENCY.labels(operation="chunk", outcome="error").observe(time.monotonic() - started)
            log.warning("chunk %s-%s of %s failed: %s: %s", request.start_seq, request.end_seq_exclusive,
                        cause.conversation_id, kind, exc, exc_info=not _expected(exc))
            return self._failed(cause, request, f"{kind}: {exc}", getattr(exc, "retryable", True))
        metrics.LLM_LATENCY.labels(operation="chunk", outcome="ok").observe(time.monotonic() - started)
        log.info("Chunked messages %s-%s of %s: %d facts (gate %s)", request.start_seq,
                 request.end_seq_exclusive - 1, cause.conversation_id, len(result.payload["facts"]),
                 extraction.gate.method)
        return result

    async def _recorded(self, cause: Envelope, request: fe.ChunkRequested, inputs: ChunkInputs,
                        extraction: Extraction, started: float) -> Envelope:
        result = extraction.result
        vectors = await self.embedder.embed_documents([result.summary, *(f.content for f in result.facts)])
        model = self.embedder.model
        tenant, conversation = cause.tenant_id, cause.conversation_id
        start, end = request.start_seq, request.end_seq_exclusive
        facts = [
            fe.RecordedFact(
                fact_id=ids.fact_id(tenant, conversation, start, end, fact.content), category=fact.category,
                memory_type=fact.memory_type, content=fact.content, importance=fact.importance,
                tags=list(fact.tags), embedding=ids.to_vector(vectors[index + 1], model),
                relation=fact.relation, target_fact_id=fact.target_fact_id,
            )
            for index, fact in enumerate(result.facts)
        ]
        payload = fe.ChunkRecorded(
            chunk_id=ids.chunk_id(tenant, conversation, start, end), start_seq=start, end_seq_exclusive=end,
            attempt=request.attempt, owner_user_id=inputs.owner_user_id, subject_id=inputs.subject_id,
            summary=result.summary, embedding=ids.to_vector(vectors[0], model), facts=facts, gate=extraction.gate,
            extractor=result.extractor, model=extraction.model, prompt_version=extraction.prompt_version,
            source_event_ids=inputs.event_ids, observed_at=inputs.observed_at, occurred_start=inputs.occurred_start,
            generation_time_ms=int((time.monotonic() - started) * 1000),
            remapped_categories=list(result.remapped_categories),
        )
        envelope = new_event(fe.CHUNK_RECORDED, payload, tenant_id=tenant, conversation_id=conversation,
                             user_id=inputs.owner_user_id, subject_id=inputs.subject_id, seq=end - 1)
        size = len(encode(envelope))
        if size > self.max_event_bytes:
            raise ValueError(f"chunk.recorded would be {size} bytes > {self.max_event_bytes}; "
                             "lower facts.max_facts_per_chunk or the embedding dimensions")
        self._remember(cause, facts)
        return envelope

    def _failed(self, cause: Envelope, request: fe.ChunkRequested, error: str, retryable: bool) -> Envelope:
        payload = fe.ChunkFailed(
            start_seq=request.start_seq, end_seq_exclusive=request.end_seq_exclusive, attempt=request.attempt,
            error=error[:2000], retryable=bool(retryable), prompt_version=request.prompt_version,
            model=request.model,
        )
        return new_event(fe.CHUNK_FAILED, payload, tenant_id=cause.tenant_id, conversation_id=cause.conversation_id,
                         user_id=cause.user_id, subject_id=cause.subject_id, seq=cause.seq)

    async def _related(self, cause: Envelope, inputs: ChunkInputs) -> list[ExistingFact]:
        """The owner's current facts of this subject that share the most words with the chunk
        (the port's full-text match, from before the chunk's newest message: a replay never shows
        an older chunk "future" facts), for the extractor to update or repeat,
        plus the facts this stage itself recorded for the conversation's latest chunks: the
        fold asks for the next range as soon as one is recorded, often before the projector
        has written its facts."""
        if self.related_facts <= 0:
            return []
        query = related_query(inputs.messages)
        if not query:
            return []
        rows = await self.reads.related(cause.tenant_id, inputs.owner_user_id, inputs.subject_id, query,
                                        self.related_facts, inputs.observed_at)
        stored = [ExistingFact(fact_id, content, category) for fact_id, content, category in rows]
        recent = self._recent.get((cause.tenant_id, cause.conversation_id), [])
        return pick_related(stored, recent, query, self.related_facts)

    def _remember(self, cause: Envelope, facts: list[fe.RecordedFact]) -> None:
        key = (cause.tenant_id, cause.conversation_id)
        kept = self._recent.pop(key, []) + [ExistingFact(f.fact_id, f.content, f.category) for f in facts]
        self._recent[key] = kept[-_RECENT_FACTS:]
        while len(self._recent) > _RECENT_CONVERSATIONS:
            self._recent.popitem(last=False)

    async def _already_recorded(self, cause: Envelope, request: fe.ChunkRequested) -> bool:
        """Redelivered or re-issued requests must not pay for a second LLM call."""
        return await self.reads.recorded(cause.tenant_id, cause.conversation_id, request.start_seq,
                                         request.end_seq_exclusive)

    async def _inputs(self, cause: Envelope, request: fe.ChunkRequested) -> ChunkInputs:
        """The range's messages once projected (a seq the log never had is a gap, not a wait)."""
        start, end = request.start_seq, request.end_seq_exclusive
        deadline = time.monotonic() + self.inputs_wait_s
        while True:
            found = await self.reads.range_rows(cause.tenant_id, cause.conversation_id, start, end)
            conversation, rows, erased = found.conversation, found.messages, found.erased
            inputs = inputs_of(conversation, rows, start, end, erased)
            if inputs is not None:
                return inputs
            if erased >= end - start:  # nothing will come: fail at once, not after the wait
                raise InputsNotReady(f"every message {start}..{end - 1} was erased")
            if time.monotonic() >= deadline:
                raise InputsNotReady(f"after {self.inputs_wait_s}s: {len(rows)}/{end - start} messages "
                                     f"{start}..{end - 1} projected")
            await asyncio.sleep(0.05)


def inputs_of(conversation: tuple | None, rows: list[tuple], start: int, end: int, erased: int = 0) -> ChunkInputs | None:
    """A range's inputs from its projected rows: the conversation's (user_id, subject_id,
    last_seq) and the messages' (seq, event_id, role, content, occurred_at) in seq order;
    None while the projection has not caught up (a seq the log never had is a gap, not a wait,
    and so are the `erased` seqs never projected because their erasure came first)."""
    complete = len(rows) + erased >= end - start or (conversation is not None and conversation[2] >= end - 1)
    if conversation is None or not rows or not complete:
        return None
    return ChunkInputs(
        owner_user_id=conversation[0], subject_id=conversation[1],
        messages=[ChatMessage(seq, role, content, at) for seq, _, role, content, at in rows],
        event_ids=[row[1] for row in rows], observed_at=max(row[4] for row in rows),
        occurred_start=min(row[4] for row in rows),
    )


def _expected(exc: Exception) -> bool:
    """Failures that need no traceback in the log (a bug does)."""
    return isinstance(exc, (LlmError, MalformedExtraction, EmbeddingError, InputsNotReady, ValueError))

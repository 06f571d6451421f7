"""The topic slice's effects: a message's embedding before the fold (`embed_for_fold`), and the
concurrent stages: requested embeddings (an older log's or state's requests), compactions."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from core.embeddings.port import Embedder, EmbeddingError
from core.llm.port import ChatMessage, LlmError
from domain.topics.fold import remember_array
from domain.topics.reads import TopicReads
from runtime.outage import Backoff, is_transient
from schemas import topic_events as te
from schemas.codec import Event, new_event
from schemas.envelope import Envelope
from streams.topics_memory.agent import Embedded
from streams.topics_memory.summarize import TopicSummarizer

log = logging.getLogger(__name__)


ZERO_VECTOR = "the embedding is zero or not finite"


def unit(vector: np.ndarray) -> list[float] | None:
    """The vector the fold matches on: unit length, each component rounded to 7 places (as the
    `topic.message_embedded` events carried it); None for a zero or non-finite vector (an empty
    message: nothing to match on)."""
    found = unit_array(vector)
    return None if found is None else found.tolist()


def unit_array(vector: np.ndarray) -> np.ndarray | None:
    """`unit` as a float64 array."""
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0.0:
        return None
    return np.round(np.asarray(vector / norm, dtype=np.float64), 7)  # = round(x, 7) each


def gave_up(error: str) -> str:
    """Why a message is placed without a vector (the text the inbox records after a failed request)."""
    return f"embedding failed: {error[:2000]}"[:500]


def embedded_of(vector: np.ndarray) -> Embedded:
    """The vector as the fold takes it, normalised and rounded once; its array is remembered for
    the fold's matching (domain/topics/fold.py, `as_array`): not converted back from the tuple."""
    found = unit_array(vector)
    if found is None:
        return Embedded(None, gave_up(ZERO_VECTOR))
    return Embedded(remember_array(tuple(found.tolist()), found))


def failed_for_good(exc: BaseException) -> str | None:
    """The error text of a failure no retry fixes (a bad text, a model bug); None for an outage
    (a remote embedder away, rate-limited, PostgreSQL or the network down): wait and embed again."""
    if isinstance(exc, EmbeddingError):
        return None if exc.retryable else str(exc)
    return None if is_transient(exc) else f"{type(exc).__name__}: {exc}"


async def embed_for_fold(embedder: Embedder, text: str, *, what: str) -> Embedded:
    """One message's embedding for the fold, through the process's embedding queue and cache
    (the message index's call for the same text is shared: core/embeddings/cache.py). An outage
    is waited out (the fold waits, in log order, and nothing is placed without its vector because
    of it); a failure for good is the message's, placed unmatched."""
    backoff = Backoff(cap_s=30.0)
    while True:
        try:
            return embedded_of((await embedder.embed_documents([text]))[0])
        except Exception as exc:  # noqa: BLE001 - sorted into the text's fault or an outage
            error = failed_for_good(exc)
            if error is not None:
                log.warning("embedding %s failed for good; placed unmatched: %s", what, error)
                return Embedded(None, gave_up(error))
            delay = backoff.next_delay()
            log.warning("embedding %s: the embedder is away (%s); again in %.1f s", what, exc, delay)
            await asyncio.sleep(delay)


class Warmed:
    """The vectors of a batch's user messages, embedded together before the processor folds the
    batch (the slice's `warm`), each taken once by that message's `prepare`. Only a speed-up:
    `prepare` embeds itself whatever is not here, so a failed warm-up (an outage, one bad text
    failing the call) costs the one-by-one path and changes no vector the fold gets. Kept for one
    batch: the next `fill` drops what a message refused before its fold (erased) left behind."""

    def __init__(self) -> None:
        self._ready: dict[tuple[str, str, int], tuple[str, Embedded]] = {}

    async def fill(self, embedder: Embedder, events: list[Event]) -> None:
        self._ready = {}
        if not events:
            return
        texts = [event.payload.content for event in events]
        try:
            vectors = await embedder.embed_documents(texts)
        except Exception as exc:  # noqa: BLE001 - each message's `prepare` embeds it and sorts the failure
            log.info("embedding %d messages ahead failed (%s); embedding them one by one", len(texts), exc)
            return
        for event, text, vector in zip(events, texts, vectors):
            self._ready[_message_of(event)] = (text, embedded_of(vector))

    def take(self, event: Event) -> Embedded | None:
        found = self._ready.pop(_message_of(event), None)
        return found[1] if found is not None and found[0] == event.payload.content else None


def _message_of(event: Event) -> tuple[str, str, int]:
    e = event.envelope
    return e.tenant_id, e.conversation_id, e.seq


def _same(cause: Envelope) -> dict:
    return dict(tenant_id=cause.tenant_id, conversation_id=cause.conversation_id, user_id=cause.user_id,
                subject_id=cause.subject_id, seq=cause.seq)


class EmbeddingStage:
    """topic.embedding_requested (a batch of them) -> one embedding call -> message_embedded/failed."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    async def handle(self, requests: list[Event]) -> list[Envelope]:
        if not requests:
            return []
        try:
            vectors = await self.embedder.embed_documents([r.payload.content for r in requests])
        except EmbeddingError as exc:
            log.warning("embedding %d topic messages failed: %s", len(requests), exc)
            return [self._failed(r, str(exc), exc.retryable) for r in requests]
        except Exception as exc:  # noqa: BLE001 - a model crash must not stop the stage; retried
            log.exception("embedding %d topic messages crashed", len(requests))
            return [self._failed(r, f"{type(exc).__name__}: {exc}", True) for r in requests]
        return [self._result(r, vector) for r, vector in zip(requests, vectors)]

    def _result(self, request: Event, vector: np.ndarray) -> Envelope:
        found = unit(vector)
        if found is None:  # e.g. an empty message: nothing to match on
            return self._failed(request, ZERO_VECTOR, False)
        payload = te.TopicMessageEmbedded(
            seq=request.payload.seq, attempt=request.payload.attempt, model=self.embedder.model, embedding=found,
        )
        return new_event(te.TOPIC_MESSAGE_EMBEDDED, payload, **_same(request.envelope))

    def _failed(self, request: Event, error: str, retryable: bool) -> Envelope:
        payload = te.TopicEmbeddingFailed(seq=request.payload.seq, attempt=request.payload.attempt,
                                          error=error[:2000], retryable=retryable)
        return new_event(te.TOPIC_EMBEDDING_FAILED, payload, **_same(request.envelope))


class InputsNotReady(Exception):
    """The messages projection has not caught up with the messages a compaction needs."""


class CompactionStage:
    """topic.compaction_requested -> incremental summary -> topic.compacted / compaction_failed."""

    def __init__(self, summarizer: TopicSummarizer, reads: TopicReads, *, inputs_wait_s: float = 30.0):
        self.summarizer = summarizer
        self.reads = reads  # the read model behind a port (domain/topics/reads.py)
        self.inputs_wait_s = inputs_wait_s

    async def handle(self, event: Event) -> Envelope | None:
        """The result event, or None when the read model already has this compaction."""
        request: te.TopicCompactionRequested = event.payload
        cause = event.envelope
        done = await self._already_compacted(cause, request)
        if done is not None:
            upto_seq, summary, model, prompt_version = done
            if upto_seq != request.upto_seq or not summary:
                log.debug("topic %s already compacted up to %s; skipping", request.topic_id, upto_seq)
                return None
            # This very compaction is in the read model (an earlier attempt's answer): say it again,
            # without a model call, so a fold that missed that answer still gets it.
            payload = te.TopicCompacted(
                topic_id=request.topic_id, upto_seq=request.upto_seq, archived_seqs=request.seqs, summary=summary,
                attempt=request.attempt, prompt_version=prompt_version or "", model=model or "",
                generation_time_ms=0,
            )
            return new_event(te.TOPIC_COMPACTED, payload, **_same(cause))
        started = time.monotonic()
        try:
            messages = await self._inputs(cause, request)
            summary = await self.summarizer.summarize(request.title, request.previous_summary, messages,
                                                      request.upto_seq)
        except (LlmError, InputsNotReady) as exc:
            retryable = getattr(exc, "retryable", True)
            log.warning("compaction of topic %s failed: %s", request.topic_id, exc)
            payload = te.TopicCompactionFailed(topic_id=request.topic_id, upto_seq=request.upto_seq,
                                               attempt=request.attempt, error=f"{type(exc).__name__}: {exc}"[:2000],
                                               retryable=retryable)
            return new_event(te.TOPIC_COMPACTION_FAILED, payload, **_same(cause))
        elapsed_ms = int((time.monotonic() - started) * 1000)
        log.info("Compacted %d messages of topic %s in %dms", len(messages), request.topic_id, elapsed_ms)
        payload = te.TopicCompacted(
            topic_id=request.topic_id, upto_seq=request.upto_seq, archived_seqs=request.seqs, summary=summary.text,
            attempt=request.attempt, prompt_version=summary.prompt_version, model=summary.model,
            generation_time_ms=elapsed_ms,
        )
        return new_event(te.TOPIC_COMPACTED, payload, **_same(cause))

    async def _already_compacted(self, cause: Envelope, request: te.TopicCompactionRequested
                                 ) -> tuple[int, str | None, str | None, str | None] | None:
        """The read model's compaction (upto_seq, summary, model, prompt version) when it covers
        this request: redelivered requests (restart, rebalance) must not pay for a second LLM call."""
        row = await self.reads.compaction(cause.tenant_id, cause.conversation_id, request.topic_id)
        return row if row is not None and row[0] >= request.upto_seq else None

    async def _inputs(self, cause: Envelope, request: te.TopicCompactionRequested) -> list[ChatMessage]:
        """The messages to archive, from the projected log (they are in it, or soon will be)."""
        deadline = time.monotonic() + self.inputs_wait_s
        while True:
            rows = await self.reads.messages(cause.tenant_id, cause.conversation_id, request.seqs)
            if len(rows) == len(set(request.seqs)):
                return [ChatMessage(seq, role, content) for seq, role, content in rows]
            if time.monotonic() >= deadline:
                raise InputsNotReady(f"after {self.inputs_wait_s}s: {len(rows)}/{len(request.seqs)} messages projected")
            await asyncio.sleep(0.05)

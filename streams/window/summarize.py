"""The concurrent stage: summary.requested -> LLM (or fallback) -> summary.completed/failed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from typing import Literal

from core import metrics
from core.llm.port import ChatMessage, LlmError, Summarizer, SummaryOutput
from domain.window.reads import SettledRow, WindowReads, WindowReadSession
from schemas.codec import Event, new_event
from schemas.envelope import Envelope
from schemas.events import SummaryCompleted, SummaryFailed, SummaryRequested
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_FAILED

log = logging.getLogger(__name__)


class InputsNotReady(Exception):
    """The projection has not caught up with the messages or base summary a request needs."""


class SummaryStage:
    """Computes one requested summary; never blocks the ordered window fold. Its inputs come
    through `reads` (the read model behind a port: domain/window/reads.py)."""

    def __init__(self, summarizer: Summarizer, reads: WindowReads, *, inputs_wait_s: float = 30.0,
                 max_wait_s: float | None = None) -> None:
        """`inputs_wait_s`: how long a request waits for inputs that do not move (no message of
        its window projected meanwhile, no base summary being computed); `max_wait_s` (default:
        4 x inputs_wait_s): how long it waits in all, progress or not."""
        self.summarizer = summarizer
        self.reads = reads
        self.inputs_wait_s = inputs_wait_s
        self.max_wait_s = 4 * inputs_wait_s if max_wait_s is None else max(max_wait_s, inputs_wait_s)
        # Summaries this stage just made: a chained request (replay) finds its base here
        # instead of waiting for the memory projector to write it.
        self._recent: OrderedDict[tuple[str, str, int], str] = OrderedDict()
        # Notified whenever this stage finishes a summary: a request waiting for its base
        # (chained replay requests) goes on at once instead of at its next poll.
        self._finished = asyncio.Condition()

    async def handle(self, event: Event) -> Envelope | None:
        """The result event for a request, or None when the request is already settled."""
        request: SummaryRequested = event.payload
        cause = event.envelope
        metrics.SUMMARIES_IN_FLIGHT.inc()
        started = time.monotonic()
        try:
            async with self.reads.session() as reads:  # one checkout for the usual case: inputs ready
                row = await reads.settled(cause.tenant_id, cause.conversation_id, request.memory_id)
                answer = settled_answer(row and row.status, row and row.attempt, request.attempt)
                if answer != "compute":
                    log.info("memory %s of %s already settled (%s, attempt %s): %s", request.memory_id,
                             cause.conversation_id, row.status, row.attempt,
                             "skipped" if answer == "skip" else "result sent again")
                    return None if answer == "skip" else self._again(cause, request, row)
                ready, previous, messages, _, _ = await self._read_inputs(reads, cause, request)
            if not ready:
                previous, messages = await self._inputs(cause, request)
            if not messages and previous is None:  # nothing to summarize: no LLM call on nothing
                raise InputsNotReady("every message of the window was erased")
            output = await self.summarizer.summarize_window(
                previous_summary=previous,
                new_messages=[ChatMessage(seq, role, content, at) for seq, _, role, content, at in messages],
                window_start_seq=request.start_seq,
                window_end_seq=request.end_seq,
            )
        except (LlmError, InputsNotReady) as exc:
            elapsed = time.monotonic() - started
            kind = "inputs" if isinstance(exc, InputsNotReady) else type(exc).__name__
            metrics.LLM_LATENCY.labels(operation="summary", outcome="error").observe(elapsed)
            metrics.SUMMARY_FAILURES.labels(kind=kind).inc()
            log.warning("summary %s of %s failed: %s", request.memory_id, cause.conversation_id, exc)
            return self._failed(cause, request, f"{kind}: {exc}")
        finally:
            metrics.SUMMARIES_IN_FLIGHT.dec()
        elapsed = time.monotonic() - started
        metrics.LLM_LATENCY.labels(operation="summary", outcome="ok").observe(elapsed)
        log.info(
            "Summarized messages %s-%s for %s in %dms",
            request.start_seq, request.end_seq, cause.conversation_id, elapsed * 1000,
        )
        self._remember((cause.tenant_id, cause.conversation_id, request.memory_id), output.text)
        async with self._finished:
            self._finished.notify_all()
        return completed_event(cause, request, output, elapsed, [event_id for _, event_id, *_ in messages])

    def _remember(self, key: tuple[str, str, int], text: str, keep: int = 20_000) -> None:
        self._recent[key] = text
        while len(self._recent) > keep:
            self._recent.popitem(last=False)

    def _failed(self, cause: Envelope, request: SummaryRequested, error: str) -> Envelope:
        return failed_event(cause, request, error, self.summarizer.model)

    def _again(self, cause: Envelope, request: SummaryRequested, row: SettledRow) -> Envelope:
        """The stored result of a settled request, as its result event once more."""
        if row.status == "completed":
            output = SummaryOutput(text=row.text or "", prompt_version=row.prompt_version, model=row.model)
            return completed_event(cause, request.model_copy(update={"attempt": row.attempt}), output,
                                   (row.generation_time_ms or 0) / 1000, list(row.source_event_ids or []))
        return failed_event(cause, request.model_copy(update={"attempt": row.attempt}), row.error or "failed",
                            row.model)

    async def _inputs(self, cause: Envelope, request: SummaryRequested):
        """Previous summary text and the new messages (base end + 1 .. end), once projected.

        The wait gives up after `inputs_wait_s` without progress, or `max_wait_s` in all. A base
        summary still being computed (a chained request behind a slow one, the usual case of a
        burst on a busy machine) and a window whose messages are arriving are progress: failing
        them would fail the chain behind them too (a request whose base failed fails)."""
        started = last_progress = time.monotonic()
        seen = None
        while True:
            async with self.reads.session() as reads:
                ready, previous, messages, missing, base_status = await self._read_inputs(reads, cause, request)
            if ready:
                return previous, messages
            now = time.monotonic()
            if (len(messages), base_status) != seen or base_status == "processing":
                seen, last_progress = (len(messages), base_status), now
            if now - last_progress >= self.inputs_wait_s or now - started >= self.max_wait_s:
                raise InputsNotReady(f"after {now - started:.0f}s: {missing}")
            async with self._finished:  # a base finished here, or 50 ms for the projection
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._finished.wait(), 0.05)

    async def _read_inputs(self, reads: WindowReadSession, cause: Envelope, request: SummaryRequested):
        """(ready, previous text, messages, what is missing, the base's status when read): ready when
        the projection has them all."""
        first = first_new_seq(request)
        expected = request.end_seq - first + 1
        tenant, conversation = cause.tenant_id, cause.conversation_id
        previous = base_status = None
        if request.base_memory_id is not None:
            previous = self._recent.get((tenant, conversation, request.base_memory_id))
        if request.base_memory_id is not None and previous is None:
            row = await reads.base(tenant, conversation, request.base_memory_id)
            base_status = row and row[0]
            if base_status == "failed":
                raise InputsNotReady(base_failed(request.base_memory_id))
            previous = row[1] if base_status == "completed" else None
        messages = await reads.messages(tenant, conversation, first, request.end_seq)
        if len(messages) < expected:  # an erased user's messages are gaps, not waits (docs/lineage.md)
            expected -= await reads.erased_seqs(tenant, conversation, first, request.end_seq)
        base_ready = request.base_memory_id is None or previous is not None
        if base_ready and len(messages) == expected:
            return True, previous, messages, None, base_status
        missing = (f"{len(messages)}/{expected} messages {first}..{request.end_seq}"
                   + ("" if base_ready else f", base summary {request.base_memory_id} not completed"))
        return False, previous, messages, missing, base_status


Answer = Literal["compute", "skip", "completed", "failed"]


def settled_answer(status: str | None, attempt: int | None, request_attempt: int) -> Answer:
    """What the stage does with a request, given the memory row of its memory id (None: none yet).

    A request comes again after a restart or a rebalance (redelivered) or from the fold's
    request timeout (re-issued, attempt + 1). Neither may pay for a second LLM call on a
    settled window, and neither may go unanswered: the fold re-issues when it has not seen the
    result, and after a worker was SIGKILLed the partition's new owner resumed from a state
    still waiting for a result that its log position was already past. Unanswered, the
    re-issues left that conversation without summaries until the fold gave up after
    `max_attempts` timeouts (tests/integration/test_two_workers.py). So a settled request gets
    its stored result again; the fold and the projection ignore a result they already applied.
    """
    if status is None:
        return "compute"
    if status == "completed":
        return "completed"
    if attempt > request_attempt:
        return "skip"  # a newer attempt was issued: its answer is the one the fold waits for
    if status == "failed" and attempt == request_attempt:
        return "failed"
    # processing, or failed by an older attempt: this attempt computes (and revives the row).
    return "compute"


def first_new_seq(request: SummaryRequested) -> int:
    """The summary folds messages first..end_seq into its base: those after the base's window."""
    return request.start_seq if request.base_end_seq is None else max(request.start_seq, request.base_end_seq + 1)


def base_failed(base_memory_id: int) -> str:
    """Why a request whose base summary failed fails too (a chain stops there)."""
    return f"base summary {base_memory_id} failed"


def completed_event(cause: Envelope, request: SummaryRequested, output: SummaryOutput, elapsed_s: float,
                    source_event_ids: list[str]) -> Envelope:
    payload = SummaryCompleted(
        memory_id=request.memory_id, start_seq=request.start_seq, end_seq=request.end_seq,
        base_memory_id=request.base_memory_id, attempt=request.attempt, text=output.text,
        generation_time_ms=int(elapsed_s * 1000), prompt_version=output.prompt_version, model=output.model,
        source_event_ids=source_event_ids,
    )
    return new_event(SUMMARY_COMPLETED, payload, **_same_conversation(cause))


def failed_event(cause: Envelope, request: SummaryRequested, error: str, model: str) -> Envelope:
    payload = SummaryFailed(
        memory_id=request.memory_id, start_seq=request.start_seq, end_seq=request.end_seq,
        attempt=request.attempt, error=error[:2000], prompt_version=request.prompt_version, model=model,
    )
    return new_event(SUMMARY_FAILED, payload, **_same_conversation(cause))


def _same_conversation(cause: Envelope) -> dict:
    return dict(
        tenant_id=cause.tenant_id, conversation_id=cause.conversation_id, user_id=cause.user_id,
        subject_id=cause.subject_id, seq=cause.seq,
    )

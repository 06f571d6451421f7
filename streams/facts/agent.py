"""Shell of the chunk fold: decoded events in, new state and chunk lifecycle events out."""

from __future__ import annotations

from core.settings import Settings
from schemas import facts_events as fe
from schemas.codec import Event, new_event
from schemas.envelope import Envelope
from schemas.registry import MESSAGE_APPENDED
from domain.facts.chunking import (
    ChunkConfig, ChunkDone, ChunkFailed, ChunkState, MessageSaved, Observed, RequestChunk, SkipChunk, Tick, step,
)

EXTRACT_STAGE = "extract-chunks"  # the concurrent stage answering chunk.requested


def chunk_config(settings: Settings) -> ChunkConfig:
    facts = settings.facts
    return ChunkConfig(
        summarization_threshold=facts.summarization_threshold, batch_size=facts.batch_size,
        request_timeout_s=facts.request_timeout_s, max_attempts=facts.max_attempts,
        failure_backoff_s=facts.failure_backoff_s, max_ahead=facts.max_ahead,
    )


def prompt_and_model(settings: Settings) -> tuple[str, str]:
    """What a chunk request records: the extraction prompt version and model (offline: the rules)."""
    from streams.facts.extraction import OFFLINE_EXTRACTOR

    prompt = settings.facts.prompt_version or settings.llm.chunk_facts_prompt_version
    if settings.llm.provider != "openai":
        return OFFLINE_EXTRACTOR, OFFLINE_EXTRACTOR
    return prompt, settings.facts.extraction_model or settings.llm.model


def observe(event: Event) -> Observed | None:
    """Decoded event -> fold input; None for what the fold ignores (requests, management events)."""
    p = event.payload
    if event.type == MESSAGE_APPENDED:
        return MessageSaved(event.envelope.seq)
    if event.type == fe.CHUNK_RECORDED:
        return ChunkDone(p.start_seq, p.end_seq_exclusive)
    if event.type == fe.CHUNK_FAILED:
        return ChunkFailed(p.start_seq, p.end_seq_exclusive, p.error, p.attempt)
    if event.type == fe.CHUNK_TICKED:
        return Tick()
    return None


def fold_event(config: ChunkConfig, state: ChunkState, event: Event, now: float, prompt_version: str,
               model: str) -> tuple[ChunkState, list[Envelope]]:
    """Apply one event of the conversation to its chunk state; the commands become events."""
    observed = observe(event)
    if observed is None:
        return state, []
    new_state, commands = step(state, observed, now, config)
    return new_state, [_to_event(event.envelope, c, prompt_version, model) for c in commands]


def _to_event(cause: Envelope, command: RequestChunk | SkipChunk, prompt_version: str, model: str) -> Envelope:
    common = dict(tenant_id=cause.tenant_id, conversation_id=cause.conversation_id, user_id=cause.user_id,
                  subject_id=cause.subject_id, seq=cause.seq)
    if isinstance(command, RequestChunk):
        payload = fe.ChunkRequested(start_seq=command.start_seq, end_seq_exclusive=command.end_seq_exclusive,
                                    attempt=command.attempt, prompt_version=prompt_version, model=model)
        return new_event(fe.CHUNK_REQUESTED, payload, **common)
    payload = fe.ChunkSkipped(start_seq=command.start_seq, end_seq_exclusive=command.end_seq_exclusive,
                              attempts=command.attempts, error=command.error[:2000])
    return new_event(fe.CHUNK_SKIPPED, payload, **common)


def tick_event(tenant_id: str, conversation_id: str) -> Envelope:
    """Sent by the timer to a conversation with a request that may be stuck or due for retry."""
    return new_event(fe.CHUNK_TICKED, fe.ChunkTicked(), tenant_id=tenant_id, conversation_id=conversation_id,
                     user_id="system")


def needs_tick(state: ChunkState, now: float, config: ChunkConfig) -> bool:
    """A request timed out, or a backed-off range is due again."""
    if state.in_flight is not None:
        return now - state.in_flight.requested_at > config.request_timeout_s
    return state.failed_attempts > 0 and now >= state.not_before

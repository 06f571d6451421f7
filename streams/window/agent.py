"""Shell of the window fold: decoded events in, new state and summary events out."""

from __future__ import annotations

from datetime import datetime

from core.settings import Settings
from schemas.codec import Event, new_event
from schemas.envelope import Envelope
from schemas.events import SummaryFailed, SummaryRequested, WindowTicked
from schemas.registry import SUMMARY_FAILED, SUMMARY_REQUESTED, WINDOW_TICKED
from domain.window.fold import (
    GiveUp,
    MessageSaved,
    RequestSummary,
    WindowConfig,
    WindowState,
    backlog,
    observe,
    step,
)

SUMMARY_STAGE = "summarize-windows"


def window_config(settings: Settings, summarizer) -> WindowConfig:
    """Requests carry the summarizer's own model and prompt version (the rows record both)."""
    return WindowConfig.from_settings(settings.window, summarizer.prompt_version, summarizer.model)


def fold_event(
    config: WindowConfig, state: WindowState, event: Event, now: float, replay_until: datetime | None = None
) -> tuple[WindowState, list[Envelope]]:
    """Apply one event of the conversation (message or summary lifecycle) to its window state.

    Messages that occurred before `replay_until` are history a replay rebuilds: their
    windows do not depend on how fast summaries come back (WindowConfig.replay_stride).
    """
    observed = observe(event.type, event.payload, event.envelope.seq)
    if observed is None:
        return state, []
    if isinstance(observed, MessageSaved) and replay_until and event.envelope.occurred_at < replay_until:
        observed = MessageSaved(observed.seq, observed.role, historic=True)
    new_state, commands = step(state, observed, now, config)
    return new_state, [_to_event(event.envelope, command, config) for command in commands]


def _to_event(cause: Envelope, command: RequestSummary | GiveUp, config: WindowConfig) -> Envelope:
    common = dict(
        tenant_id=cause.tenant_id, conversation_id=cause.conversation_id, user_id=cause.user_id,
        subject_id=cause.subject_id, seq=cause.seq,
    )
    if isinstance(command, RequestSummary):
        payload = SummaryRequested(
            memory_id=command.memory_id, start_seq=command.start_seq, end_seq=command.end_seq,
            base_memory_id=command.base_memory_id, base_end_seq=command.base_end_seq, attempt=command.attempt,
            prompt_version=command.prompt_version, model=command.model,
        )
        return new_event(SUMMARY_REQUESTED, payload, **common)
    payload = SummaryFailed(
        memory_id=command.memory_id, start_seq=command.start_seq, end_seq=command.end_seq,
        attempt=command.attempt, error=command.error, prompt_version=config.prompt_version, model=config.model,
    )
    return new_event(SUMMARY_FAILED, payload, **common)


def tick_event(tenant_id: str, conversation_id: str, user_id: str) -> Envelope:
    """Sent by the timer to a conversation whose request may be stuck."""
    return new_event(
        WINDOW_TICKED, WindowTicked(), tenant_id=tenant_id, conversation_id=conversation_id, user_id=user_id
    )


def looks_stuck(state: WindowState, now: float, config: WindowConfig) -> bool:
    return state.in_flight is not None and now - state.in_flight.requested_at > config.request_timeout_s


def looks_due(state: WindowState, now: float, config: WindowConfig) -> bool:
    """Nothing in flight, the backoff over, and a backlog a tick would catch up on."""
    return (state.in_flight is None and now >= state.not_before
            and backlog(state) >= config.backlog_limit and state.pending_end >= config.summarize_after_seq)

"""The window fold over a whole history at once (batch replay): the same pure fold as the
stream agent, with the summary requests answered in waves instead of through Kafka.

Historic messages are summarized on a fixed stride, each request chained on the previous
one (WindowConfig.replay_stride), so the requests do not depend on when answers arrive:
folding the history first and answering afterwards asks for exactly the windows a stream
replay asks for. Request k of a conversation needs the text of request k-1, hence waves:
wave k answers the k-th request of every conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from core.llm.port import ChatMessage, SummaryCall
from schemas.codec import Event
from schemas.envelope import Envelope
from schemas.events import SummaryRequested
from schemas.registry import MESSAGE_APPENDED, SUMMARY_COMPLETED
from streams.window.agent import fold_event
from domain.window.fold import WindowConfig, WindowState
from streams.window.summarize import base_failed, first_new_seq


@dataclass
class Conversation:
    key: bytes
    state: WindowState = field(default_factory=WindowState)
    # seq -> (event_id, role, content); the first event of a seq wins, as in the messages table.
    messages: dict[int, tuple[str, str, str, datetime]] = field(default_factory=dict)
    requests: list[Event] = field(default_factory=list)  # summary.requested, in fold order
    results: dict[int, Event] = field(default_factory=dict)  # memory_id -> summary.completed/failed


@dataclass(frozen=True)
class Pending:
    """One request of a wave: what to ask the summarizer, or why it fails without asking."""

    conversation: Conversation
    request: Event
    call: SummaryCall | None
    source_event_ids: list[str]
    error: str | None = None


class HistoryFold:
    """Folds one partition's history; `now` is fixed, so no request looks stuck meanwhile."""

    def __init__(self, config: WindowConfig, now: float, replay_until: datetime | None) -> None:
        self.config, self.now, self.replay_until = config, now, replay_until
        self.conversations: dict[bytes, Conversation] = {}

    def add(self, key: bytes, event: Event) -> list[Envelope]:
        """One event of the log; returns the requests it caused (already kept for the waves)."""
        conversation = self.conversations.get(key)
        if conversation is None:
            conversation = self.conversations[key] = Conversation(key)
        if event.type == MESSAGE_APPENDED:
            e = event.envelope
            conversation.messages.setdefault(e.seq, (e.event_id, event.payload.role, event.payload.content,
                                                        e.occurred_at))
        conversation.state, outgoing = fold_event(self.config, conversation.state, event, self.now, self.replay_until)
        for envelope in outgoing:
            # Built from a validated model a moment ago: no second validation.
            conversation.requests.append(Event(envelope, SummaryRequested.model_construct(**envelope.payload)))
        return outgoing

    @property
    def waves(self) -> int:
        return max((len(c.requests) for c in self.conversations.values()), default=0)

    def wave(self, index: int) -> list[Pending]:
        """The `index`-th request of every conversation that has one."""
        return [_pending(c, c.requests[index]) for c in self.conversations.values() if index < len(c.requests)]

    def finish(self, conversation: Conversation) -> WindowState:
        """The state after the answers too: what the stream agent holds once they are folded."""
        state = conversation.state
        for request in conversation.requests:
            result = conversation.results.get(request.payload.memory_id)
            if result is not None:
                state, _ = fold_event(self.config, state, result, self.now, self.replay_until)
        return state


def _pending(conversation: Conversation, request: Event) -> Pending:
    """The stage's inputs (streams/window/summarize.py), taken from the history in memory."""
    r: SummaryRequested = request.payload
    previous = None
    if r.base_memory_id is not None:
        base = conversation.results.get(r.base_memory_id)
        if base is None or base.type != SUMMARY_COMPLETED:
            error = "inputs: " + base_failed(r.base_memory_id) if base is not None else (
                f"inputs: base summary {r.base_memory_id} is not part of this history")
            return Pending(conversation, request, None, [], error)
        previous = base.payload.text
    first = first_new_seq(r)
    found = [(seq, conversation.messages[seq]) for seq in range(first, r.end_seq + 1) if seq in conversation.messages]
    expected = r.end_seq - first + 1
    if len(found) != expected:
        return Pending(conversation, request, None, [],
                       f"inputs: {len(found)}/{expected} messages {first}..{r.end_seq} in the log")
    call = SummaryCall(previous, [ChatMessage(seq, role, content, at) for seq, (_, role, content, at) in found],
                       r.start_seq, r.end_seq)
    return Pending(conversation, request, call, [event_id for _, (event_id, *_) in found])

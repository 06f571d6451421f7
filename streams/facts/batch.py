"""The chunk fold over a whole history at once (batch replay): the same pure fold as the
stream agent (streams/facts/agent.py), with the chunk requests answered in waves instead of
through Kafka.

The fold keeps one request in flight per conversation here (`max_ahead` 0: the live fold may
ask for ranges ahead, the same ranges) and asks for the next range when a result comes back, so the ranges are fixed by the messages alone: [0, b), [b, 2b)... while
more than `summarization_threshold` messages are unsummarized. Folding the history first and
answering afterwards asks for exactly the ranges a stream replay asks for: wave k answers the
request in flight of every conversation, and folding the answers asks for wave k+1.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from schemas import facts_events as fe
from schemas.codec import Event
from schemas.envelope import Envelope
from schemas.registry import REGISTRY
from streams.facts.agent import fold_event
from domain.facts.chunking import ChunkConfig, ChunkState

@dataclass
class ChunkConversation:
    key: bytes
    state: ChunkState = field(default_factory=ChunkState)
    asked: Event | None = None  # the chunk.requested of the current wave, not answered yet


def as_event(envelope: Envelope) -> Event:
    """An envelope built from a validated model a moment ago: no second validation."""
    return Event(envelope, REGISTRY[envelope.type].payload.model_construct(**envelope.payload))


class ChunkHistoryFold:
    """Folds one partition's history; `now` is fixed, so no request looks stuck meanwhile."""

    def __init__(self, config: ChunkConfig, now: float, prompt_version: str, model: str) -> None:
        # One range at a time (the waves): the ranges are the same as with ranges asked for ahead
        # (`max_ahead`: fixed by the messages alone either way), and a wave answers one each.
        config = replace(config, max_ahead=0)
        self.config, self.now, self.prompt_version, self.model = config, now, prompt_version, model
        self.conversations: dict[bytes, ChunkConversation] = {}

    def add(self, key: bytes, event: Event) -> list[Envelope]:
        """One event of the log or an answer; returns the events the fold emitted (requests,
        skips), in order. The newest request is kept as the conversation's next question."""
        conversation = self.conversations.get(key)
        if conversation is None:
            conversation = self.conversations[key] = ChunkConversation(key)
        conversation.state, outgoing = fold_event(self.config, conversation.state, event, self.now,
                                                  self.prompt_version, self.model)
        for envelope in outgoing:
            if envelope.type == fe.CHUNK_REQUESTED:
                conversation.asked = as_event(envelope)
        return outgoing

    def wave(self) -> list[ChunkConversation]:
        """Every conversation with a request in flight that has not been answered in a wave."""
        return [c for c in self.conversations.values() if c.asked is not None]

    def answer(self, conversation: ChunkConversation, result: Event | None) -> list[Envelope]:
        """Fold the stage's answer (chunk.recorded / chunk.failed) to the conversation's question;
        returns what the fold emitted, e.g. the next request. None (no answer) leaves the request
        in flight for the live agents' timer, as a lost answer would."""
        conversation.asked = None
        if result is None:
            return []
        return self.add(conversation.key, result)

    def changed(self) -> list[ChunkConversation]:
        """The conversations whose state the agent would have written to its table."""
        return [c for c in self.conversations.values() if c.state != ChunkState()]

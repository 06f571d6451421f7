"""Messages waiting for their embedding before the topic fold sees them, in log order (pure)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class InboxConfig:
    embedding_timeout_seconds: float = 60.0  # then the embedding is asked for again
    embedding_max_attempts: int = 3  # then the message is placed without one
    max_waiting: int = 200  # per conversation; beyond it the oldest wait is given up
    max_waiting_chars: int = 200_000  # the same for the text held (the state is one Kafka record)


@dataclass(frozen=True)
class Waiting:
    """One message of the conversation, held until everything before it has been placed."""

    seq: int
    role: str  # "user" | "assistant"
    content: str
    timestamp: float  # the message's event time
    user_id: str
    subject_id: str | None = None
    importance: float | None = None
    embedding: tuple[float, ...] | None = None  # user messages: set by the embedding stage
    attempt: int = 0  # embedding requests sent so far
    requested_at: float = 0.0  # wall clock of the latest request
    gave_up: str | None = None  # why it is placed without an embedding

    @property
    def ready(self) -> bool:
        return self.role != "user" or self.embedding is not None or self.gave_up is not None

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))  # not dataclasses.asdict: it deep-copies every float
        data["embedding"] = list(self.embedding) if self.embedding is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Waiting:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if known.get("embedding") is not None:
            known["embedding"] = tuple(float(x) for x in known["embedding"])
        return cls(**known)


@dataclass(frozen=True)
class EmbeddingRequested:
    seq: int
    content: str
    attempt: int
    user_id: str
    subject_id: str | None


@dataclass(frozen=True)
class Inbox:
    queue: tuple[Waiting, ...] = ()  # arrival (log) order; the head is released first

    def find(self, seq: int) -> Waiting | None:
        return next((w for w in self.queue if w.seq == seq), None)

    def _with(self, item: Waiting) -> Inbox:
        return Inbox(tuple(item if w.seq == item.seq else w for w in self.queue))

    def to_dict(self) -> dict[str, Any]:
        return {"queue": [w.to_dict() for w in self.queue]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Inbox:
        return cls(tuple(Waiting.from_dict(w) for w in data.get("queue", ())))


Stepped = tuple[Inbox, tuple[EmbeddingRequested, ...]]


def _request(item: Waiting, wall: float) -> tuple[Waiting, EmbeddingRequested]:
    item = replace(item, attempt=item.attempt + 1, requested_at=wall)
    return item, EmbeddingRequested(item.seq, item.content, item.attempt, item.user_id, item.subject_id)


def admit(inbox: Inbox, item: Waiting, wall: float, config: InboxConfig) -> Stepped:
    """Queue a new message; a user message asks for its embedding. A known seq changes nothing."""
    if inbox.find(item.seq) is not None:
        return inbox, ()
    commands: tuple[EmbeddingRequested, ...] = ()
    if item.role == "user" and not item.ready:
        item, request = _request(item, wall)
        commands = (request,)
    inbox = Inbox(inbox.queue + (item,))
    # Bounded: past the limits, the head (the oldest message still waiting) is placed without
    # its embedding; release() then drains what was waiting behind it.
    chars = sum(len(w.content) for w in inbox.queue)
    if (len(inbox.queue) > config.max_waiting or chars > config.max_waiting_chars) and not inbox.queue[0].ready:
        head = inbox.queue[0]
        inbox = inbox._with(replace(head, gave_up=f"{len(inbox.queue)} messages ({chars} characters) waiting"))
    return inbox, commands


def embedded(inbox: Inbox, seq: int, vector: tuple[float, ...]) -> Inbox:
    """Any attempt's answer counts; one for a message no longer waiting is a duplicate."""
    item = inbox.find(seq)
    if item is None or item.ready:
        return inbox
    return inbox._with(replace(item, embedding=vector))


def failed(inbox: Inbox, seq: int, attempt: int, error: str, retryable: bool, wall: float,
           config: InboxConfig) -> Stepped:
    """Only the latest attempt's failure counts: retry it, or give up when it cannot succeed."""
    item = inbox.find(seq)
    if item is None or item.ready or attempt != item.attempt:
        return inbox, ()
    if retryable and item.attempt < config.embedding_max_attempts:
        item, request = _request(item, wall)
        return inbox._with(item), (request,)
    return inbox._with(replace(item, gave_up=f"embedding failed: {error}"[:500])), ()


def sweep(inbox: Inbox, wall: float, config: InboxConfig) -> Stepped:
    """Re-ask for embeddings that never came back; give up after the last attempt."""
    commands: list[EmbeddingRequested] = []
    for item in inbox.queue:
        if item.ready or wall - item.requested_at <= config.embedding_timeout_seconds:
            continue
        if item.attempt < config.embedding_max_attempts:
            item, request = _request(item, wall)
            commands.append(request)
        else:
            item = replace(item, gave_up=f"no embedding after {item.attempt} attempts")
        inbox = inbox._with(item)
    return inbox, tuple(commands)


def release(inbox: Inbox) -> tuple[Inbox, tuple[Waiting, ...]]:
    """The ready messages at the head, in order; a waiting user message holds back the rest."""
    count = 0
    while count < len(inbox.queue) and inbox.queue[count].ready:
        count += 1
    return Inbox(inbox.queue[count:]), inbox.queue[:count]


def looks_stuck(inbox: Inbox, wall: float, config: InboxConfig) -> bool:
    return any(not w.ready and wall - w.requested_at > config.embedding_timeout_seconds for w in inbox.queue)

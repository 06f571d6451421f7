"""Messages waiting for their embedding before the topic fold sees them, in log order (pure).

Bounded without giving anything up: the inbox holds at most `max_waiting` messages
(`max_waiting_chars` of text and vectors); a message arriving beyond that is not held but
*deferred*: the inbox keeps only the seq range of the deferred messages (the backlog) and,
once everything held is placed, asks for them to be read back from the projected log, a
batch at a time, with their embeddings (`BacklogRead`, answered by the recall stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.topics.state import evolve


@dataclass(frozen=True)
class InboxConfig:
    embedding_timeout_seconds: float = 60.0  # then the embedding is asked for again
    embedding_max_attempts: int = 3  # then the message is placed without one
    max_waiting: int = 100  # held per conversation; beyond it new messages are deferred
    max_waiting_chars: int = 300_000  # the same for text + vectors held (the state is one Kafka record)
    backlog_batch: int = 100  # deferred messages read back per request

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


VECTOR_CHARS = 2_100  # a held vector in the changelog: 384 float32 as base64 (+ per-item fields)


def held_size(item: Waiting) -> int:
    return len(item.content) + (VECTOR_CHARS if item.embedding is not None else 200)


@dataclass(frozen=True)
class Backlog:
    """Messages seen but not held: every user/assistant message of the log with
    first_seq <= seq <= last_seq is still to be placed, in order, read back from the log."""

    first_seq: int
    last_seq: int
    requested_at: float = 0.0  # wall clock of the read in flight; 0: none
    attempt: int = 0  # reads of first_seq asked for so far

    def holds(self, seq: int) -> bool:
        return self.first_seq <= seq <= self.last_seq


@dataclass(frozen=True)
class BacklogRead:
    """Read the deferred messages first_seq.. (at most `limit`, none past `upto_seq`) back."""

    from_seq: int
    upto_seq: int
    limit: int
    attempt: int
    final: bool  # the last attempt: take what the log has, place unembeddable messages unmatched


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
    backlog: Backlog | None = None  # deferred messages, all after the queue's

    def find(self, seq: int) -> Waiting | None:
        return next((w for w in self.queue if w.seq == seq), None)

    def knows(self, seq: int) -> bool:
        """Held or deferred: a redelivered copy changes nothing."""
        return self.find(seq) is not None or (self.backlog is not None and self.backlog.holds(seq))

    def _with(self, item: Waiting) -> Inbox:
        return evolve(self, queue=tuple(item if w.seq == item.seq else w for w in self.queue))

    def to_dict(self) -> dict[str, Any]:
        return {"queue": [w.to_dict() for w in self.queue],
                "backlog": dict(vars(self.backlog)) if self.backlog is not None else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Inbox:
        backlog = data.get("backlog")
        return cls(tuple(Waiting.from_dict(w) for w in data.get("queue", ())),
                   Backlog(**{k: v for k, v in backlog.items() if k in Backlog.__dataclass_fields__})
                   if backlog else None)


Command = EmbeddingRequested | BacklogRead
Stepped = tuple[Inbox, tuple[Command, ...]]


def _request(item: Waiting, wall: float) -> tuple[Waiting, EmbeddingRequested]:
    item = evolve(item, attempt=item.attempt + 1, requested_at=wall)
    return item, EmbeddingRequested(item.seq, item.content, item.attempt, item.user_id, item.subject_id)


def admit(inbox: Inbox, item: Waiting, wall: float, config: InboxConfig) -> Stepped:
    """Queue a new message (a user message asks for its embedding), or defer it when the
    inbox is full or already deferring (log order). A known seq changes nothing. A message
    older than the deferred range (late: delivered after newer ones) is held whatever the
    bounds: reading it back with the range would read the messages between again."""
    if inbox.knows(item.seq):
        return inbox, ()
    late = inbox.backlog is not None and item.seq < inbox.backlog.first_seq
    if inbox.backlog is not None and not late:
        return evolve(inbox, backlog=evolve(inbox.backlog, last_seq=max(inbox.backlog.last_seq, item.seq))), ()
    held = sum(held_size(w) for w in inbox.queue)
    if not late and inbox.queue and (
            len(inbox.queue) >= config.max_waiting or held + held_size(item) > config.max_waiting_chars):
        return evolve(inbox, backlog=Backlog(item.seq, item.seq)), ()  # back-pressure: read it back later
    commands: tuple[Command, ...] = ()
    if item.role == "user" and not item.ready:
        item, request = _request(item, wall)
        commands = (request,)
    return evolve(inbox, queue=inbox.queue + (item,)), commands


def recalled(inbox: Inbox, item: Waiting, after_seq: int) -> Inbox:
    """A deferred message read back (ready: with its vector, or given up for a real reason).
    Taken only in order: `after_seq` is the message before it in that read (the read's
    from_seq - 1 for its first), so a stale or duplicate read changes nothing."""
    backlog = inbox.backlog
    if backlog is None or after_seq + 1 != backlog.first_seq or not backlog.holds(item.seq) or not item.ready:
        return inbox
    backlog = evolve(backlog, first_seq=item.seq + 1)
    return Inbox(inbox.queue + (item,), backlog if backlog.first_seq <= backlog.last_seq else None)


def recovered(inbox: Inbox, item: Waiting) -> Inbox:
    """A passed-over message read back by a gap read (domain/topics/gaps.py), ready: held like a
    late message (whatever the bounds: a read brings at most a batch), placed when it reaches the
    head. A seq already held or deferred changes nothing."""
    if inbox.knows(item.seq) or not item.ready:
        return inbox
    return evolve(inbox, queue=inbox.queue + (item,))


def read_done(inbox: Inbox, last_recalled_seq: int, through_seq: int) -> Inbox:
    """The end of a read: every message up to `through_seq` was sent back (the last one it
    sent is `last_recalled_seq`). Counts only if all of those were taken in order."""
    backlog = inbox.backlog
    if backlog is None or last_recalled_seq + 1 != backlog.first_seq:
        return inbox
    backlog = evolve(backlog, first_seq=max(backlog.first_seq, through_seq + 1), requested_at=0.0, attempt=0)
    return evolve(inbox, backlog=backlog if backlog.first_seq <= backlog.last_seq else None)


def next_read(inbox: Inbox, wall: float, config: InboxConfig) -> Stepped:
    """Once everything held is placed, ask for the next batch of deferred messages; a read
    with no answer after the embedding timeout is asked again (never given up: the last
    attempts place what cannot be embedded unmatched, see BacklogRead.final)."""
    backlog = inbox.backlog
    if backlog is None or inbox.queue:
        return inbox, ()
    if backlog.requested_at and wall - backlog.requested_at <= config.embedding_timeout_seconds:
        return inbox, ()
    backlog = evolve(backlog, requested_at=wall, attempt=backlog.attempt + 1)
    read = BacklogRead(backlog.first_seq, backlog.last_seq, config.backlog_batch, backlog.attempt,
                       backlog.attempt >= config.embedding_max_attempts)
    return evolve(inbox, backlog=backlog), (read,)


def embedded(inbox: Inbox, seq: int, vector: tuple[float, ...]) -> Inbox:
    """Any attempt's answer counts; one for a message no longer waiting is a duplicate."""
    item = inbox.find(seq)
    if item is None or item.ready:
        return inbox
    return inbox._with(evolve(item, embedding=vector))


def failed(inbox: Inbox, seq: int, attempt: int, error: str, retryable: bool, wall: float,
           config: InboxConfig) -> Stepped:
    """Only the latest attempt's failure counts: retry it, or give up when it cannot succeed."""
    item = inbox.find(seq)
    if item is None or item.ready or attempt != item.attempt:
        return inbox, ()
    if retryable and item.attempt < config.embedding_max_attempts:
        item, request = _request(item, wall)
        return inbox._with(item), (request,)
    return inbox._with(evolve(item, gave_up=f"embedding failed: {error}"[:500])), ()


def sweep(inbox: Inbox, wall: float, config: InboxConfig) -> Stepped:
    """Re-ask for embeddings that never came back; give up after the last attempt."""
    commands: list[Command] = []
    for item in inbox.queue:
        if item.ready or wall - item.requested_at <= config.embedding_timeout_seconds:
            continue
        if item.attempt < config.embedding_max_attempts:
            item, request = _request(item, wall)
            commands.append(request)
        else:
            item = evolve(item, gave_up=f"no embedding after {item.attempt} attempts")
        inbox = inbox._with(item)
    return inbox, tuple(commands)


def release(inbox: Inbox) -> tuple[Inbox, tuple[Waiting, ...]]:
    """The ready messages at the head, in order; a waiting user message holds back the rest."""
    count = 0
    while count < len(inbox.queue) and inbox.queue[count].ready:
        count += 1
    return evolve(inbox, queue=inbox.queue[count:]), inbox.queue[:count]


def looks_stuck(inbox: Inbox, wall: float, config: InboxConfig) -> bool:
    """An embedding or a backlog read that never came back (or a backlog not yet asked for)."""
    backlog = inbox.backlog
    if backlog is not None and not inbox.queue and (
            not backlog.requested_at or wall - backlog.requested_at > config.embedding_timeout_seconds):
        return True
    return any(not w.ready and wall - w.requested_at > config.embedding_timeout_seconds for w in inbox.queue)

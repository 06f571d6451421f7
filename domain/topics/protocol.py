"""What the topic fold consumes (inputs) and emits (commands, which the agent turns into events)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

from domain.topics.state import TopicMessage


@dataclass(frozen=True)
class UserMessage:
    seq: int
    content: str
    embedding: Sequence[float]
    timestamp: float
    importance: float | None = None  # None keeps the topic's importance (0.5 for a new one)


@dataclass(frozen=True)
class AssistantMessage:
    seq: int
    content: str
    timestamp: float


@dataclass(frozen=True)
class UnmatchedUserMessage:
    """A user message whose embedding never came: it joins the active topic without matching."""

    seq: int
    content: str
    timestamp: float
    reason: str


@dataclass(frozen=True)
class CompactionDone:
    topic_id: str
    upto_seq: int
    summary: str


@dataclass(frozen=True)
class CompactionFailed:
    topic_id: str
    upto_seq: int
    error: str


@dataclass(frozen=True)
class Tick:
    """A timer fired: only the compaction scan (timeouts, retries) and eviction run."""


Observed = Union[UserMessage, AssistantMessage, UnmatchedUserMessage, CompactionDone, CompactionFailed, Tick]


@dataclass(frozen=True)
class TopicCreated:
    topic_id: str
    title: str
    seq: int


@dataclass(frozen=True)
class MessageAssigned:
    topic_id: str
    seq: int
    similarity: float | None  # cosine to the joined topic; None when it founded it or is a reply


@dataclass(frozen=True)
class MessageUnassigned:
    """A reply (or an unmatched user message) with no active topic to join: named, not dropped."""

    seq: int
    reason: str


@dataclass(frozen=True)
class TopicActivated:
    topic_id: str
    previous_topic_id: str | None


@dataclass(frozen=True)
class ArchiveRestoreRequested:
    """A topic with an archive is active again: the read side brings its history back into context."""

    topic_id: str


@dataclass(frozen=True)
class CompactionRequested:
    topic_id: str
    messages_to_archive: tuple[TopicMessage, ...]
    previous_summary: str | None  # the summary is extended incrementally
    upto_seq: int
    attempt: int = 1
    asked_seq: int | None = None  # the fold's position when it was decided (the event's seq)


@dataclass(frozen=True)
class TopicEvicted:
    topic_id: str
    priority: float
    reason: str  # "decayed" (seed 004: priority < eviction_priority) or "capacity"


Command = Union[TopicCreated, MessageAssigned, MessageUnassigned, TopicActivated,
                ArchiveRestoreRequested, CompactionRequested, TopicEvicted]

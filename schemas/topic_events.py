"""Events of the topic memory system (seed 004): stable names, payload models, specs."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from schemas.events import Payload
from schemas.spec import EventSpec

TOPIC_EMBEDDING_REQUESTED = "topic.embedding_requested"
TOPIC_MESSAGE_EMBEDDED = "topic.message_embedded"
TOPIC_EMBEDDING_FAILED = "topic.embedding_failed"
TOPIC_CREATED = "topic.created"
TOPIC_MESSAGE_ASSIGNED = "topic.message_assigned"
TOPIC_MESSAGE_UNASSIGNED = "topic.message_unassigned"
TOPIC_ACTIVATED = "topic.activated"
TOPIC_ARCHIVE_RESTORE_REQUESTED = "topic.archive_restore_requested"
TOPIC_COMPACTION_REQUESTED = "topic.compaction_requested"
TOPIC_COMPACTED = "topic.compacted"
TOPIC_COMPACTION_FAILED = "topic.compaction_failed"
TOPIC_EVICTED = "topic.evicted"
TOPIC_TICKED = "topic.ticked"
TOPIC_BACKLOG_REQUESTED = "topic.backlog_requested"
TOPIC_MESSAGE_RECALLED = "topic.message_recalled"
TOPIC_BACKLOG_READ = "topic.backlog_read"

class TopicEmbeddingRequested(Payload):
    """The topic fold needs the embedding of user message `seq` before it can place it."""

    seq: StrictInt = Field(ge=0)
    content: StrictStr
    attempt: StrictInt = Field(default=1, ge=1)


class TopicMessageEmbedded(Payload):
    """The embedding stage computed the (unit-length) vector of user message `seq`."""

    seq: StrictInt = Field(ge=0)
    attempt: StrictInt = Field(default=1, ge=1)
    embedding: list[StrictFloat] = Field(min_length=1)
    model: StrictStr


class TopicEmbeddingFailed(Payload):
    """The embedding stage could not embed user message `seq`."""

    seq: StrictInt = Field(ge=0)
    attempt: StrictInt = Field(default=1, ge=1)
    error: StrictStr
    retryable: StrictBool


class TopicSnapshot(Payload):
    """A topic's decay fields right after the change that carries them (set, never added)."""

    title: StrictStr
    importance: StrictFloat = Field(ge=0, le=1)
    access_count: StrictInt = Field(ge=0)
    message_count: StrictInt = Field(ge=0)
    created_at: datetime
    last_active_at: datetime


class TopicCreated(Payload):
    """A user message matched no topic: a new one starts, titled from that message."""

    topic_id: StrictStr
    title: StrictStr
    seq: StrictInt = Field(ge=0)
    importance: StrictFloat = Field(ge=0, le=1)
    created_at: datetime


class TopicMessageAssigned(Payload):
    """Message `seq` joined topic `topic_id` (a user message by similarity, a reply by turn)."""

    topic_id: StrictStr
    seq: StrictInt = Field(ge=0)
    role: Literal["user", "assistant"]
    content: StrictStr
    occurred_at: datetime
    # Cosine to the topic it joined; None when it founded the topic, is a reply or was
    # placed without an embedding (`matched` False).
    similarity: StrictFloat | None = None
    matched: StrictBool = True
    # Re-sent after a crash by a fold that keeps no message text: `content` is empty and the
    # projector takes role, text and time from the projected log instead.
    content_from_log: StrictBool = False
    topic: TopicSnapshot


class TopicMessageUnassigned(Payload):
    """Message `seq` could not be placed in any topic (named, never dropped silently)."""

    seq: StrictInt = Field(ge=0)
    reason: StrictStr


class TopicActivated(Payload):
    """`topic_id` became the conversation's active topic at message `seq`."""

    topic_id: StrictStr
    previous_topic_id: StrictStr | None = None
    seq: StrictInt = Field(ge=0)


class TopicArchiveRestoreRequested(Payload):
    """A topic with an archive is active again: its archived messages go back into context."""

    topic_id: StrictStr
    seq: StrictInt = Field(ge=0)
    archived_count: StrictInt = Field(ge=0)
    archived_upto_seq: StrictInt


class TopicCompactionRequested(Payload):
    """Summarize messages `seqs` of the topic into its summary and move them to its archive."""

    topic_id: StrictStr
    upto_seq: StrictInt = Field(ge=0)
    seqs: list[StrictInt] = Field(min_length=1)
    previous_summary: StrictStr | None = None
    title: StrictStr
    attempt: StrictInt = Field(default=1, ge=1)
    prompt_version: StrictStr
    model: StrictStr


class TopicCompacted(Payload):
    """The topic's new summary covers its messages <= upto_seq; `archived_seqs` leave the
    active set for the compressed archive (contents are in the log and the read model)."""

    topic_id: StrictStr
    upto_seq: StrictInt = Field(ge=0)
    archived_seqs: list[StrictInt] = Field(min_length=1)
    summary: StrictStr
    attempt: StrictInt = Field(default=1, ge=1)
    prompt_version: StrictStr
    model: StrictStr
    generation_time_ms: StrictInt = Field(ge=0)


class TopicCompactionFailed(Payload):
    """No summary for the requested compaction (the fold retries after a delay)."""

    topic_id: StrictStr
    upto_seq: StrictInt = Field(ge=0)
    attempt: StrictInt = Field(default=1, ge=1)
    error: StrictStr
    retryable: StrictBool


class TopicEvicted(Payload):
    """The topic left the working set; its history stays in the log and the archive."""

    topic_id: StrictStr
    priority: StrictFloat = Field(ge=0)
    reason: Literal["decayed", "capacity"]
    evicted_at: datetime


class TopicTicked(Payload):
    """A timer asked the topic fold to re-issue requests that never came back."""

    reason: StrictStr = "timeout-scan"


class TopicBacklogRequested(Payload):
    """The fold deferred messages (its inbox was full): read those with from_seq <= seq <=
    upto_seq back from the projected log, at most `limit`, in order, with their embeddings."""

    from_seq: StrictInt = Field(ge=0)
    upto_seq: StrictInt = Field(ge=0)
    limit: StrictInt = Field(ge=1)
    attempt: StrictInt = Field(default=1, ge=1)
    # The last attempt: take what the log holds after the wait, and send a message that
    # cannot be embedded without a vector (it joins the active topic unmatched).
    final: StrictBool = False
    # A gap read (domain/topics/gaps.py): only the seqs in these [first, last] ranges (seqs the
    # fold passed over), answered once the projected log holds them all or is past upto_seq.
    ranges: list[list[StrictInt]] | None = None


class TopicMessageRecalled(Payload):
    """A deferred message read back for the fold (envelope seq, user and subject are the message's)."""

    seq: StrictInt = Field(ge=0)
    after_seq: StrictInt = Field(ge=-1)  # the message before it in the same read (from_seq - 1 for the first)
    role: Literal["user", "assistant"]
    content: StrictStr
    occurred_at: datetime
    importance: StrictFloat | None = None
    embedding: list[StrictFloat] | None = None  # user messages; None with `error`
    model: StrictStr | None = None
    error: StrictStr | None = None  # why a user message has no embedding


class TopicBacklogRead(Payload):
    """The end of one backlog read: every message up to `through_seq` was sent back."""

    from_seq: StrictInt = Field(ge=0)
    through_seq: StrictInt = Field(ge=-1)
    last_recalled_seq: StrictInt = Field(ge=-1)
    count: StrictInt = Field(ge=0)
    attempt: StrictInt = Field(default=1, ge=1)
    # Not in the projected log: a backlog read says so on its final attempt only; a gap read when
    # the log is past them (or on its final attempt).
    missing: StrictInt = Field(default=0, ge=0)
    gap: StrictBool = False  # the answer to a gap read (`ranges`): `missing` seqs are given up


SPECS: tuple[EventSpec, ...] = (
    EventSpec(TOPIC_EMBEDDING_REQUESTED, 1, TopicEmbeddingRequested, requires_seq=True),
    EventSpec(TOPIC_MESSAGE_EMBEDDED, 1, TopicMessageEmbedded, requires_seq=True),
    EventSpec(TOPIC_EMBEDDING_FAILED, 1, TopicEmbeddingFailed, requires_seq=True),
    EventSpec(TOPIC_CREATED, 1, TopicCreated, requires_seq=True),
    EventSpec(TOPIC_MESSAGE_ASSIGNED, 1, TopicMessageAssigned, requires_seq=True),
    EventSpec(TOPIC_MESSAGE_UNASSIGNED, 1, TopicMessageUnassigned, requires_seq=True),
    EventSpec(TOPIC_ACTIVATED, 1, TopicActivated, requires_seq=True),
    EventSpec(TOPIC_ARCHIVE_RESTORE_REQUESTED, 1, TopicArchiveRestoreRequested, requires_seq=True),
    EventSpec(TOPIC_COMPACTION_REQUESTED, 1, TopicCompactionRequested),
    EventSpec(TOPIC_COMPACTED, 1, TopicCompacted),
    EventSpec(TOPIC_COMPACTION_FAILED, 1, TopicCompactionFailed),
    EventSpec(TOPIC_EVICTED, 1, TopicEvicted),
    EventSpec(TOPIC_TICKED, 1, TopicTicked),
    EventSpec(TOPIC_BACKLOG_REQUESTED, 1, TopicBacklogRequested),
    EventSpec(TOPIC_MESSAGE_RECALLED, 1, TopicMessageRecalled, requires_seq=True),
    EventSpec(TOPIC_BACKLOG_READ, 1, TopicBacklogRead),
)

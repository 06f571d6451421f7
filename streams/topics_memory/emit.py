"""Fold and inbox commands -> topic events (envelopes), with what the read model needs in them."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from pydantic_core import to_jsonable_python

from schemas import topic_events as te
from schemas.codec import new_event
from schemas.envelope import Envelope
from schemas.registry import REGISTRY
from domain.topics.gaps import GapRead
from domain.topics.inbox import BacklogRead, EmbeddingRequested, Waiting
from domain.topics.protocol import (
    ArchiveRestoreRequested,
    CompactionRequested,
    MessageAssigned,
    MessageUnassigned,
    TopicActivated,
    TopicCreated,
    TopicEvicted,
)
from domain.topics.state import Topic, TopicsState


@dataclass(frozen=True)
class Cause:
    """Who the derived events are about: copied into every envelope they go out in."""

    tenant_id: str
    conversation_id: str
    user_id: str
    subject_id: str | None
    seq: int | None

    def common(self) -> dict:
        return dict(tenant_id=self.tenant_id, conversation_id=self.conversation_id, user_id=self.user_id,
                    subject_id=self.subject_id, seq=self.seq)


def when(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def _event_id() -> str:
    """str(uuid.uuid4()), without the UUID object (a fifth of building an event)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def built(type: str, payload: dict, common: dict) -> Envelope:
    """`new_event` for the events of every message (assigned, created, activated), the payload
    given as its JSON form: no model is built nor validated for what the fold made itself from
    validated input (the same bytes: tests/unit/test_topic_fold_recorded.py). Validation stays at
    the edges (decoding); the payload's keys are in its model's field order."""
    return Envelope.model_construct(type=type, schema_version=REGISTRY[type].version, event_id=_event_id(),
                                    occurred_at=datetime.now(UTC), payload=payload, **common)


def _time(timestamp: float) -> str:
    """A time as the payload models write it in JSON (pydantic's own serializer)."""
    return to_jsonable_python(when(timestamp))


def snapshot(topic: Topic) -> dict:
    """te.TopicSnapshot's JSON form."""
    return {"title": topic.title, "importance": topic.importance, "access_count": topic.access_count,
            "message_count": topic.message_count, "created_at": _time(topic.created_at),
            "last_active_at": _time(topic.last_active_at)}


def assigned(cause: Cause, topic: Topic, seq: int, role: str, content: str, timestamp: float,
             similarity: float | None, matched: bool, *, content_from_log: bool = False) -> Envelope:
    """te.TopicMessageAssigned."""
    return built(te.TOPIC_MESSAGE_ASSIGNED, {
        "topic_id": topic.topic_id, "seq": seq, "role": role, "content": content, "occurred_at": _time(timestamp),
        "similarity": similarity, "matched": matched, "content_from_log": content_from_log,
        "topic": snapshot(topic)}, cause.common())


def to_event(command: object, cause: Cause, state: TopicsState, now: float, *, prompt_version: str,
             model: str, message: Waiting | None = None) -> Envelope:
    """One command as an event. `state` is the fold's state after the step that emitted it;
    `message` is the message that step placed (for MessageAssigned)."""
    common = cause.common()
    if isinstance(command, EmbeddingRequested):
        payload = te.TopicEmbeddingRequested(seq=command.seq, content=command.content, attempt=command.attempt)
        return new_event(te.TOPIC_EMBEDDING_REQUESTED, payload, **(common | dict(
            user_id=command.user_id, subject_id=command.subject_id, seq=command.seq)))
    if isinstance(command, BacklogRead):
        payload = te.TopicBacklogRequested(from_seq=command.from_seq, upto_seq=command.upto_seq, limit=command.limit,
                                           attempt=command.attempt, final=command.final)
        return new_event(te.TOPIC_BACKLOG_REQUESTED, payload, **common)
    if isinstance(command, GapRead):
        payload = te.TopicBacklogRequested(from_seq=command.from_seq, upto_seq=command.upto_seq, limit=command.limit,
                                           attempt=command.attempt, final=command.final,
                                           ranges=[[first, last] for first, last in command.ranges])
        return new_event(te.TOPIC_BACKLOG_REQUESTED, payload, **common)
    if isinstance(command, MessageAssigned) and (message is None or message.seq != command.seq):
        # A reply left unassigned, placed once its turn's late user message was (issue 22):
        # the fold keeps no text, so the projector takes it from the projected log.
        topic = state.topic(command.topic_id)
        placed = next(m for m in topic.messages if m.seq == command.seq)
        return assigned(replace(cause, seq=command.seq), topic, placed.seq, placed.role, "", placed.timestamp, None, True,
                        content_from_log=True)
    if isinstance(command, MessageAssigned):
        matched = message.role != "user" or message.gave_up is None
        return assigned(cause, state.topic(command.topic_id), message.seq, message.role, message.content,
                        message.timestamp, command.similarity, matched)
    if isinstance(command, TopicCreated):
        topic = state.topic(command.topic_id)
        return built(te.TOPIC_CREATED, {"topic_id": command.topic_id, "title": command.title, "seq": command.seq,
                                        "importance": topic.importance, "created_at": _time(topic.created_at)},
                     common)
    if isinstance(command, TopicActivated):
        return built(te.TOPIC_ACTIVATED, {"topic_id": command.topic_id, "previous_topic_id": command.previous_topic_id,
                                          "seq": cause.seq}, common)
    if isinstance(command, ArchiveRestoreRequested):
        topic = state.topic(command.topic_id)
        payload = te.TopicArchiveRestoreRequested(topic_id=command.topic_id, seq=cause.seq,
                                                  archived_count=topic.archived_count,
                                                  archived_upto_seq=topic.summary_upto_seq)
        return new_event(te.TOPIC_ARCHIVE_RESTORE_REQUESTED, payload, **common)
    if isinstance(command, MessageUnassigned):
        payload = te.TopicMessageUnassigned(seq=command.seq, reason=command.reason)
        return new_event(te.TOPIC_MESSAGE_UNASSIGNED, payload, **(common | dict(seq=command.seq)))
    if isinstance(command, CompactionRequested):
        topic = state.compacting(command.topic_id)
        payload = te.TopicCompactionRequested(
            topic_id=command.topic_id, upto_seq=command.upto_seq,
            seqs=[m.seq for m in command.messages_to_archive], previous_summary=command.previous_summary,
            title=topic.title if topic else "", attempt=command.attempt, prompt_version=prompt_version, model=model,
        )
        # The seq at which it was decided, however much later it is asked for: the read model
        # ends a restore with a compaction asked at or after it (projections/topics.py).
        if command.asked_seq is not None:
            common["seq"] = command.asked_seq
        return new_event(te.TOPIC_COMPACTION_REQUESTED, payload, **common)
    if isinstance(command, TopicEvicted):
        payload = te.TopicEvicted(topic_id=command.topic_id, priority=command.priority, reason=command.reason,
                                  evicted_at=when(now))
        return new_event(te.TOPIC_EVICTED, payload, **common)
    raise TypeError(f"no event for {command!r}")

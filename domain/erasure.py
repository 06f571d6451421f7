"""When a message belongs to an erasure already applied (docs/lineage.md, "Messages the
messages projector reaches after the erasure").

A `user.erased` is keyed `erasure-<user>` and lands on another partition than the user's
conversations, so the erasure projector can apply it before the messages projector reaches a
message written earlier (in a replay it always does: it skips everything else). Such a message
must not be projected; a message the user writes after the erasure must be.

"Written before the erasure" is decided on the log, never by the message's own `occurred_at`
(set by the producer: `memory-agent ingest` of an old transcript carries the transcript's
dates, and a user importing history after their erasure would lose it):

- on the same partition (a `conversation.erased` always shares its conversation's partition),
  by offset: exact;
- otherwise, when the erasure recorded its bound (per partition, the first offset it does not
  erase: projections/time_order.py), by offset against that bound: exact, and the same line
  the erasure itself drew when it deleted;
- otherwise by the records' Kafka timestamps (the producer's clock when it appended them; the
  broker's with `LogAppendTime`): a message appended at or before the erasure's millisecond
  is before it. Clock skew between producers moves the line by the skew.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogPosition:
    """A record of the conversation topic: partition, offset, Kafka timestamp (ms). An erasure
    applied before its position was recorded has partition -1 and its `occurred_at`."""

    partition: int
    offset: int
    timestamp_ms: int


def written_before(message: LogPosition, erasure: LogPosition, bound: Mapping[int, int] | None = None) -> bool:
    """`bound`: the erasure's recorded {partition: first offset after it}, when it has one."""
    if message.partition == erasure.partition and erasure.partition >= 0:
        return message.offset < erasure.offset
    if bound and message.partition in bound:
        return message.offset < bound[message.partition]
    return message.timestamp_ms <= erasure.timestamp_ms


@dataclass(frozen=True, slots=True)
class AppliedErasure:
    """An applied erasure as the messages projector needs it: whose messages it erased (a user
    erasure: the user's, everywhere) and which conversations it erased whole."""

    event_id: str
    tenant_id: str
    user_id: str | None
    conversations: frozenset[str]
    position: LogPosition
    bound: Mapping[int, int] | None = None  # {partition: first offset not erased}; None before 0070

    def covers(self, tenant_id: str, conversation_id: str, user_id: str, position: LogPosition) -> bool:
        return (tenant_id == self.tenant_id
                and (user_id == self.user_id or conversation_id in self.conversations)
                and written_before(position, self.position, self.bound))


def erased_by(erasures: Iterable[AppliedErasure], tenant_id: str, conversation_id: str, user_id: str,
              position: LogPosition) -> str | None:
    """The id of the first applied erasure that covers this message, or None."""
    for erasure in erasures:
        if erasure.covers(tenant_id, conversation_id, user_id, position):
            return erasure.event_id
    return None

"""A user erasure is applied in time order across partitions (docs/lineage.md, "In time order
across partitions").

`user.erased` is keyed `erasure-<user>`: it lands on another partition than the user's
conversations. The projector group of the conversation log (messages + erasure, one consumer)
applies a batch in log order per partition, but across partitions a fetch may hand it the
erasure before messages written earlier on other partitions (a backlog there, a restart). The
erasure then did not know those messages' conversations: the messages projector leaves the
messages out afterwards, but what the topic fold placed from them meanwhile stayed, and the
erasure's scope (the conversations the user owns, erased whole) was what happened to be
projected.

So the group holds a user erasure back until the messages projector has applied, on every
partition, everything appended before the erasure's Kafka timestamp (`targets`: per partition
the first offset at or after it, the end of the log when none is; the erasure's own partition:
its offset). While it holds it, the erasure's partition is paused at the erasure, and every
other partition at its target once reached (what comes later is written after the erasure and
must follow it); the partitions still behind go on. Then the erasure knows every conversation
the user wrote in before it, and deletes (or derives again) what the fold placed from them.
Positions are read from `projector_offsets`, so a partition another worker process owns counts
too. No cycle between two held erasures: the earlier one's targets never reach past the later
one. Bound: `MAX_HOLD_S`; past it the erasure is applied anyway (logged), as before this rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from schemas import erasure_events as ee
from schemas.codec import peek_type

MAX_HOLD_S = 60.0
_SNAPSHOT_TRIES = 5  # a partition written without pause: the last lookup is used
MESSAGES = "messages"  # projections/messages.py's name in projector_offsets


def gates(record: ConsumerRecord) -> bool:
    """Whether the record is an erasure to apply in time order: a user erasure after every
    partition's messages written before it, a conversation erasure (on its conversation's own
    partition: log order is time order for it) after that partition's."""
    return peek_type(record.value) in ee.ERASURE_TYPES


@dataclass
class Hold:
    """A user erasure held back: the offset per partition the messages projector must reach."""

    erasure: TopicPartition
    offset: int
    timestamp: int  # the erasure record's Kafka timestamp (ms)
    targets: dict[int, int]
    since: float


def limits(holds: Sequence[Hold]) -> dict[TopicPartition, int]:
    """Per partition, the first offset no record of which may be applied yet."""
    found: dict[TopicPartition, int] = {}
    for hold in holds:
        for partition, target in hold.targets.items():
            tp = TopicPartition(hold.erasure.topic, partition)
            found[tp] = min(found.get(tp, target), target)
    return found


def cut(records: Sequence[ConsumerRecord], limit: dict[TopicPartition, int]
        ) -> tuple[list[ConsumerRecord], dict[TopicPartition, int]]:
    """The records before their partition's limit, in order; and per partition cut, the first
    offset left out (where to read again)."""
    kept: list[ConsumerRecord] = []
    left_out: dict[TopicPartition, int] = {}
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        if tp in left_out or (tp in limit and record.offset >= limit[tp]):
            left_out.setdefault(tp, record.offset)
        else:
            kept.append(record)
    return kept, left_out


async def targets(consumer: AIOKafkaConsumer, erasure: ConsumerRecord) -> dict[int, int]:
    """{partition: the offset the messages projector must have reached} for this erasure: also
    where its scope ends (projections/erasure.py's bound: the first offset it does not erase)."""
    if peek_type(erasure.value) != ee.USER_ERASED:
        return {erasure.partition: erasure.offset}
    topic = erasure.topic
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    others = [tp for tp in partitions if tp.partition != erasure.partition]
    found, ends = {}, {}
    for _ in range(_SNAPSHOT_TRIES):
        # The timestamp lookup and the end offsets are two requests: a record appended between
        # them (after the erasure) would be inside an end taken after a lookup that missed it.
        # Ends read before and after the lookup that agree make one snapshot of the log.
        before = await consumer.end_offsets(others) if others else {}
        found = await consumer.offsets_for_times({tp: erasure.timestamp for tp in others}) if others else {}
        ends = await consumer.end_offsets(others) if others else {}
        if before == ends:
            break
    reached = {tp.partition: found[tp].offset if found.get(tp) is not None else ends[tp] for tp in others}
    return reached | {erasure.partition: erasure.offset}


async def positions(conn: psycopg.AsyncConnection, topic: str) -> dict[int, int]:
    """The messages projector's stored positions: {partition: next offset}."""
    async with conn.transaction():
        return dict(await (await conn.execute(
            "SELECT partition, next_offset FROM projector_offsets WHERE projector = %s AND topic = %s",
            (MESSAGES, topic))).fetchall())


def ready(read: dict[int, int], hold: Hold, holds: Sequence[Hold]) -> bool:
    """Whether the messages projector has reached `hold`'s targets, a partition stopped at a
    later held erasure counting as reached: that one waits for this one (a cycle otherwise,
    whatever the records' timestamps say; the earlier erasure, by timestamp then partition,
    goes first)."""
    mine = (hold.timestamp, hold.erasure.partition)
    later = {(h.erasure.partition, h.offset) for h in holds if (h.timestamp, h.erasure.partition) > mine}
    return all(read.get(p, 0) >= offset or (p, read.get(p, 0)) in later
               for p, offset in hold.targets.items() if offset > 0)

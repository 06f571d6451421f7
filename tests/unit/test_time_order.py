"""projections/time_order.py's pure parts: which records a held user erasure keeps back."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from projections.time_order import Hold, cut, gates, limits, ready
from schemas import erasure_events as ee
from schemas.codec import encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED

TOPIC = "log"


def record(partition: int, offset: int, value: bytes = b"") -> ConsumerRecord:
    return ConsumerRecord(TOPIC, partition, offset, 1_000 + offset, 0, None, value, None, 0, len(value), [])


def test_the_lowest_target_of_every_hold_limits_a_partition():
    holds = [Hold(TopicPartition(TOPIC, 0), 5, 100, {0: 5, 1: 9, 2: 3}, 0.0),
             Hold(TopicPartition(TOPIC, 2), 7, 200, {0: 8, 1: 4, 2: 7}, 0.0)]
    assert limits(holds) == {TopicPartition(TOPIC, 0): 5, TopicPartition(TOPIC, 1): 4, TopicPartition(TOPIC, 2): 3}


def test_records_from_a_partition_s_limit_on_are_left_out_and_read_again_from_the_first():
    batch = [record(0, 4), record(1, 2), record(0, 5), record(1, 3), record(0, 6), record(2, 0)]
    kept, left_out = cut(batch, {TopicPartition(TOPIC, 0): 5, TopicPartition(TOPIC, 1): 9})
    assert [(r.partition, r.offset) for r in kept] == [(0, 4), (1, 2), (1, 3), (2, 0)]
    assert left_out == {TopicPartition(TOPIC, 0): 5}


def test_only_a_user_erasure_waits_for_other_partitions():
    user = new_event(ee.USER_ERASED, ee.UserErased(erased_user_id="alice"), tenant_id="t",
                     conversation_id=ee.erasure_stream("alice"), user_id="admin")
    message = new_event(MESSAGE_APPENDED, MessageAppended(role="user", content="hi"), tenant_id="t",
                        conversation_id="c", user_id="alice", seq=0)
    assert gates(record(0, 0, encode(user)))
    assert not gates(record(0, 1, encode(message)))


def test_a_hold_is_ready_once_the_messages_projector_reached_every_target():
    hold = Hold(TopicPartition(TOPIC, 0), 5, 100, {0: 5, 1: 9, 2: 0}, 0.0)
    assert not ready({0: 5, 1: 8}, hold, [])
    assert ready({0: 5, 1: 9}, hold, [])
    assert ready({0: 5, 1: 12, 3: 1}, hold, [])


def test_of_two_erasures_waiting_for_each_other_the_earlier_goes_first():
    # Each one's target lies past the other (what their timestamps made of the log): a cycle.
    first = Hold(TopicPartition(TOPIC, 3), 0, 100, {3: 0, 7: 1}, 0.0)
    second = Hold(TopicPartition(TOPIC, 7), 0, 200, {3: 1, 7: 0}, 0.0)
    read = {3: 0, 7: 0}
    assert ready(read, first, [second])
    assert not ready(read, second, [first])
    # The same timestamp: the lower partition first.
    twin = Hold(TopicPartition(TOPIC, 7), 0, 100, {3: 1, 7: 0}, 0.0)
    assert ready(read, first, [twin]) and not ready(read, twin, [first])

"""The stage runner's commit position never passes a request that is still in flight."""

from aiokafka import TopicPartition

from streams.stages import OffsetTracker, batches

TP = TopicPartition("memory-events", 0)
OTHER = TopicPartition("memory-events", 1)


def test_position_waits_for_the_oldest_unfinished_request():
    offsets = OffsetTracker()
    for offset in range(5):
        offsets.started(TP, offset)
    for offset in (4, 3, 1, 0):  # finishing out of order; 2 is still running
        offsets.finished(TP, offset)
    assert offsets.position(TP) == 2
    assert offsets.to_commit() == {TP: 2}
    offsets.finished(TP, 2)
    assert offsets.position(TP) == 5


def test_skipped_records_move_the_position_only_when_nothing_older_is_pending():
    offsets = OffsetTracker()
    offsets.started(TP, 10)
    offsets.seen(TP, 11)
    offsets.seen(TP, 12)
    assert offsets.position(TP) == 10
    offsets.finished(TP, 10)
    assert offsets.position(TP) == 13


def test_to_commit_reports_only_positions_that_moved_and_forget_drops_partitions():
    offsets = OffsetTracker()
    offsets.seen(TP, 0)
    offsets.started(OTHER, 7)
    assert offsets.to_commit() == {TP: 1, OTHER: 7}
    offsets.committed({TP: 1, OTHER: 7})
    assert offsets.to_commit() == {}
    assert offsets.in_flight() == 1 and offsets.in_flight([TP]) == 0
    offsets.forget([OTHER])
    assert offsets.in_flight() == 0 and offsets.position(OTHER) is None


def test_batches_keep_order_and_size():
    assert list(batches(list(range(5)), 2)) == [[0, 1], [2, 3], [4]]
    assert list(batches([], 3)) == []

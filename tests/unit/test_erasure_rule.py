"""domain/erasure.py: which messages an applied erasure covers, and the chunk stage counting
the seqs it dropped as gaps (docs/lineage.md)."""

from datetime import UTC, datetime

from domain.erasure import AppliedErasure, LogPosition, erased_by, written_before
from streams.facts.stage import inputs_of

ERASURE = LogPosition(partition=2, offset=100, timestamp_ms=1_000_000)


def test_on_the_erasures_partition_the_offset_decides_whatever_the_clocks_say():
    assert written_before(LogPosition(2, 99, 2_000_000), ERASURE)  # later clock, earlier offset
    assert not written_before(LogPosition(2, 101, 0), ERASURE)  # earlier clock, later offset


def test_on_another_partition_the_record_timestamps_decide():
    assert written_before(LogPosition(0, 5_000, 999_999), ERASURE)
    assert written_before(LogPosition(0, 5_000, 1_000_000), ERASURE)  # same millisecond: before
    assert not written_before(LogPosition(0, 1, 1_000_001), ERASURE)


def test_an_erasure_without_a_recorded_position_compares_timestamps_only():
    old = LogPosition(-1, 0, 1_000_000)
    assert written_before(LogPosition(-1, 7, 1_000_000), old)
    assert not written_before(LogPosition(0, 0, 1_000_001), old)


def test_a_user_erasure_covers_the_users_messages_and_its_whole_conversations_in_its_tenant():
    user = AppliedErasure("e1", "t", "alice", frozenset({"conv-a"}), ERASURE)
    before, after = LogPosition(0, 1, 999), LogPosition(0, 2, 1_000_001)
    assert erased_by([user], "t", "conv-b", "alice", before) == "e1"  # her words in bob's conversation
    assert erased_by([user], "t", "conv-a", "bob", before) == "e1"  # bob in her conversation, erased whole
    assert erased_by([user], "t", "conv-b", "bob", before) is None
    assert erased_by([user], "t2", "conv-b", "alice", before) is None  # another tenant's alice
    assert erased_by([user], "t", "conv-new", "alice", after) is None  # she writes again afterwards
    assert erased_by([user], "t", "conv-a", "alice", after) is None


def test_a_conversation_erasure_covers_that_conversation_only():
    conversation = AppliedErasure("e2", "t", None, frozenset({"conv-a"}), ERASURE)
    assert erased_by([conversation], "t", "conv-a", "bob", LogPosition(2, 50, 5_000_000)) == "e2"
    assert erased_by([conversation], "t", "conv-a", "bob", LogPosition(2, 150, 0)) is None
    assert erased_by([conversation], "t", "conv-c", "alice", LogPosition(2, 50, 0)) is None


def test_a_chunk_range_counts_seqs_dropped_by_their_erasure_as_gaps_not_waits():
    at = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [(0, "e0", "user", "hi", at), (2, "e2", "user", "there", at)]
    owner = ("bob", None, 2)  # last_seq 2: the range 0..3 is not complete by last_seq
    assert inputs_of(owner, rows, 0, 4) is None  # seqs 1 and 3 still to come
    assert inputs_of(owner, rows, 0, 4, erased=1) is None
    inputs = inputs_of(owner, rows, 0, 4, erased=2)  # 1 and 3 were dropped: nothing to wait for
    assert inputs is not None and [m.seq for m in inputs.messages] == [0, 2] and inputs.event_ids == ["e0", "e2"]

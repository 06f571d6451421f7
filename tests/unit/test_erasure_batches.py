"""The erasure projector on a consumer of its own (docs/security.md, "A flood of erasures and the
other tenants"): its transactions are runs of one tenant's erasures, each erasure bounded by
where its scope ends on the log."""

from aiokafka.structs import ConsumerRecord

from core.settings import Settings
from domain.erasure import AppliedErasure, LogPosition, written_before
from projections import erasure
from projections.erasure import ErasureProjector, batches
from projections.runner import barrier_segments
from projections.time_order import gates
from schemas import erasure_events as ee
from schemas.codec import encode, new_event
from schemas.envelope import conversation_key
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED


def user_erased(tenant: str, user: str, offset: int, partition: int = 0) -> ConsumerRecord:
    event = new_event(ee.USER_ERASED, ee.UserErased(erased_user_id=user), tenant_id=tenant,
                      conversation_id=ee.erasure_stream(user), user_id="admin")
    return ConsumerRecord("log", partition, offset, 0, 0, conversation_key(tenant, event.conversation_id),
                          encode(event), None, 0, 0, [])


def message(tenant: str, offset: int) -> ConsumerRecord:
    event = new_event(MESSAGE_APPENDED, MessageAppended(role="user", content="hi"), tenant_id=tenant,
                      conversation_id="c", user_id="bob", seq=0)
    return ConsumerRecord("log", 0, offset, 0, 0, conversation_key(tenant, "c"), encode(event), None, 0, 0, [])


def offsets(parts) -> list[list[int]]:
    return [[r.offset for r in part] for part in parts]


def test_a_flood_of_one_tenant_s_erasures_is_cut_into_runs_of_at_most_max_batch(monkeypatch):
    monkeypatch.setattr(erasure, "MAX_BATCH", 8)
    flood = [user_erased("a", f"u{i}", i) for i in range(erasure.MAX_BATCH * 2 + 1)]
    parts = batches(flood)
    assert [len(p) for p in parts] == [erasure.MAX_BATCH, erasure.MAX_BATCH, 1]
    assert [r for p in parts for r in p] == flood  # log order kept, nothing lost


def test_a_run_ends_where_the_tenant_changes_and_messages_go_with_the_run_they_follow(monkeypatch):
    monkeypatch.setattr(erasure, "MAX_BATCH", 8)
    records = [message("b", 0), user_erased("a", "u1", 1), message("b", 2), user_erased("a", "u2", 3),
               user_erased("c", "u3", 4), message("b", 5)]
    assert offsets(batches(records)) == [[0, 1, 2, 3], [4, 5]]
    monkeypatch.setattr(erasure, "MAX_BATCH", 1)  # the default: one erasure per transaction
    assert offsets(batches(records)) == [[0, 1, 2], [3], [4, 5]]


def test_alone_on_its_consumer_the_erasure_projector_cuts_the_batch_itself(monkeypatch):
    monkeypatch.setattr(erasure, "MAX_BATCH", 8)
    records = [user_erased("a", f"u{i}", i) for i in range(3)] + [user_erased("b", "u9", 3)]
    projector = ErasureProjector(Settings())
    assert offsets(barrier_segments(records, [projector])) == [[0, 1, 2], [3]]


def test_a_conversation_erasure_waits_for_the_messages_projector_too():
    event = new_event(ee.CONVERSATION_ERASED, ee.ConversationErased(erased_conversation_id="c"), tenant_id="a",
                      conversation_id="c", user_id="alice")
    assert gates(ConsumerRecord("log", 0, 0, 0, 0, b"a/c", encode(event), None, 0, 0, []))


def test_with_a_recorded_bound_the_offset_decides_on_every_partition_whatever_the_clocks_say():
    at = LogPosition(partition=2, offset=100, timestamp_ms=1_000_000)
    bound = {0: 40, 1: 7, 2: 100}
    assert written_before(LogPosition(0, 39, 2_000_000), at, bound)  # later clock, before the bound
    assert not written_before(LogPosition(0, 40, 0), at, bound)  # earlier clock, at the bound
    assert not written_before(LogPosition(2, 100, 0), at, bound)
    assert written_before(LogPosition(5, 0, 999), at, bound)  # a partition it does not name: the clocks
    alice = AppliedErasure("e", "t", "alice", frozenset(), at, bound)
    assert alice.covers("t", "x", "alice", LogPosition(1, 6, 9_999_999))
    assert not alice.covers("t", "x", "alice", LogPosition(1, 7, 0))


def test_the_projector_keeps_the_bounds_its_group_gives_and_forgets_the_oldest(monkeypatch):
    monkeypatch.setattr(erasure, "_BOUNDS_KEPT", 2)
    projector = ErasureProjector(Settings())
    for i in range(3):
        projector.bound(user_erased("a", f"u{i}", i), {0: i})
    assert list(projector.bounds) == [("log", 0, 1), ("log", 0, 2)]

"""Seqs the topic fold passed over and never got: read back from the projected log after a
timeout, placed once, and given up (but still placeable) when the log is past them without them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime


from domain.topics.gaps import GapConfig, GapRead, GapRecovery, due, missing_in, outstanding, settled, step
from schemas import topic_events as te
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from tests.unit.test_topic_agent import T0, Driver, axis, config, event, kinds

CFG = GapConfig(timeout_seconds=60.0, max_attempts=3, limit=100)


def test_outstanding_ranges_are_those_above_the_cursor_cut_at_it():
    assert outstanding(((15, 20), (3, 5)), -1) == ((3, 5), (15, 20))
    assert outstanding(((3, 5), (15, 20)), 4) == ((5, 5), (15, 20))
    assert outstanding(((3, 5), (15, 20)), 20) == ()


def test_a_gap_is_timed_from_when_it_is_noticed_then_asked_for_once_per_timeout():
    skipped = ((10, 14),)
    rec, read = step(GapRecovery(), skipped, T0, CFG)
    assert read is None and rec.noticed_at == T0
    assert step(rec, skipped, T0 + 60, CFG) == (rec, None)  # not overdue yet
    assert due(rec, skipped, T0 + 61, CFG) and not due(rec, skipped, T0 + 59, CFG)
    rec, read = step(rec, skipped, T0 + 61, CFG)
    assert read == GapRead(((10, 14),), 100, 1, False) and rec.asked == (10, 14)
    assert step(rec, skipped, T0 + 100, CFG) == (rec, None)  # in flight
    rec, read = step(rec, skipped, T0 + 122, CFG)  # no answer: asked again
    assert read.attempt == 2 and not read.final
    rec, read = step(rec, skipped, T0 + 183, CFG)
    assert read.attempt == 3 and read.final  # the last attempt takes what the log holds


def test_an_answer_settles_its_seqs_for_good_and_counts_the_missing_once():
    skipped = ((10, 14), (30, 31))
    rec, _ = step(GapRecovery(), skipped, T0, CFG)
    rec, read = step(rec, skipped, T0 + 61, CFG)
    assert read.ranges == ((10, 14), (30, 31))
    rec = settled(rec, 10, 31, 2, T0 + 62)
    assert (rec.cursor, rec.asked, rec.given_up) == (31, None, 2)
    assert settled(rec, 10, 31, 2, T0 + 63).given_up == 2  # a redelivered answer counts nothing
    # Given up, the seqs stay skipped (a late arrival is still placed) but are never asked again.
    assert step(rec, skipped, T0 + 10_000, CFG) == (GapRecovery(31, given_up=2), None)
    assert not due(rec, skipped, T0 + 10_000, CFG)


def test_a_stale_answer_moves_the_cursor_but_leaves_the_read_in_flight():
    rec, _ = step(GapRecovery(), ((10, 14),), T0, CFG)
    rec, _ = step(rec, ((10, 14),), T0 + 61, CFG)
    rec = settled(rec, 5, 7, 1, T0 + 62)
    assert (rec.cursor, rec.asked, rec.given_up) == (7, (10, 14), 0)


def test_a_read_of_limit_rows_settles_only_through_its_last_row():
    rec, _ = step(GapRecovery(), ((0, 500),), T0, CFG)
    rec, read = step(rec, ((0, 500),), T0 + 61, CFG)
    rec = settled(rec, 0, 99, 0, T0 + 62)
    assert outstanding(((0, 500),), rec.cursor) == ((100, 500),)
    assert step(rec, ((0, 500),), T0 + 62, CFG)[1] is None  # the rest waits its own timeout
    assert step(rec, ((0, 500),), T0 + 123, CFG)[1].ranges == ((100, 500),)


def test_nothing_outstanding_forgets_the_timing():
    rec, _ = step(GapRecovery(), ((10, 14),), T0, CFG)
    assert step(rec, (), T0 + 1, CFG) == (GapRecovery(), None)


def test_missing_counts_the_asked_seqs_up_to_through_the_log_did_not_hold():
    assert missing_in(((10, 14), (30, 31)), 31, 5) == 2
    assert missing_in(((10, 14), (30, 31)), 12, 3) == 0
    assert GapRecovery.from_dict(GapRecovery(3, 1.5, (4, 9), 2.0, 2, 7).to_dict()) == GapRecovery(3, 1.5, (4, 9), 2.0,
                                                                                                    2, 7)
    assert GapRecovery.from_dict(None) == GapRecovery()


# The agent: seqs 0..9 and 15..20 arrive, 10..14 never do; the recall stage brings them back.

def gap_driver() -> Driver:
    d = Driver(config(embedding_timeout_s=60))
    for seq in list(range(0, 10)) + list(range(15, 21)):
        if seq % 2 == 0:
            d.say(seq, "user", f"question {seq}")
            d.embed(seq, axis(0))
        else:
            d.say(seq, "assistant", f"answer {seq}")
    return d


def gap_read(d: Driver, from_seq: int, through_seq: int, missing: int = 0) -> list:
    payload = te.TopicBacklogRead(from_seq=from_seq, through_seq=through_seq, last_recalled_seq=through_seq, count=0,
                                  missing=missing, gap=True)
    return d.feed(event(te.TOPIC_BACKLOG_READ, payload, None))


def recalled(d: Driver, seq: int) -> list:
    user = seq % 2 == 0
    payload = te.TopicMessageRecalled(seq=seq, after_seq=seq - 1, role="user" if user else "assistant",
                                      content=f"m {seq}", occurred_at=datetime.fromtimestamp(T0 + seq, UTC),
                                      embedding=axis(0) if user else None, model="m" if user else None)
    return d.feed(event(te.TOPIC_MESSAGE_RECALLED, payload, seq, T0 + seq))


def tick(d: Driver) -> list:
    return d.feed(event(te.TOPIC_TICKED, te.TopicTicked(), None))


def test_the_fold_reads_the_seqs_it_passed_over_back_and_places_each_once():
    from streams.topics_memory.agent import needs_tick

    d = gap_driver()
    assert d.state.topics.skipped == ((10, 14),) and d.state.gaps.noticed_at == T0
    assert tick(d) == []  # not overdue
    d.wall = T0 + 61
    assert needs_tick(d.state, d.wall, d.cfg)
    (asked,) = tick(d)
    assert asked == (te.TOPIC_BACKLOG_REQUESTED, te.TopicBacklogRequested(
        from_seq=10, upto_seq=14, limit=100, attempt=1, final=False, ranges=[[10, 14]]))
    placed = []
    for seq in range(10, 15):
        placed += recalled(d, seq)
    assert [p.seq for t, p in placed if t == te.TOPIC_MESSAGE_ASSIGNED] == [10, 11, 12, 13, 14]
    assert gap_read(d, 10, 14) == []
    assert d.state.topics.skipped == () and d.state.gaps == GapRecovery(14)
    assert sum(recalled(d, 12) == [] for _ in range(2)) == 2  # a second read of the same seq: nothing
    assert d.state.inbox.queue == ()
    assert not due(d.state.gaps, d.state.topics.skipped, T0 + 10_000, CFG)
    topic = d.state.topics.topics[0]
    assert topic.message_count == 21 and d.state.topics.last_seq == 20


def test_a_seq_missing_from_the_log_too_is_given_up_after_the_read_but_placed_if_it_ever_comes():
    d = gap_driver()
    d.wall = T0 + 61
    tick(d)
    for seq in (10, 11, 13, 14):  # 12 was dead-lettered: not in the projected log
        recalled(d, seq)
    gap_read(d, 10, 14, missing=1)
    assert d.state.topics.skipped == ((12, 12),) and d.state.gaps.given_up == 1
    d.wall = T0 + 100_000
    assert not due(d.state.gaps, d.state.topics.skipped, d.wall, CFG)  # never asked again
    assert te.TOPIC_BACKLOG_REQUESTED not in kinds(tick(d))
    late = d.say(12, "user", "question 12") + d.embed(12, axis(0))
    assert [p.seq for t, p in late if t == te.TOPIC_MESSAGE_ASSIGNED] == [12]
    assert d.state.topics.skipped == ()


def test_a_late_arrival_before_the_read_fills_the_gap_and_nothing_is_asked():
    d = gap_driver()
    for seq in range(10, 15):
        d.say(seq, "user" if seq % 2 == 0 else "assistant", f"m {seq}")
        if seq % 2 == 0:
            d.embed(seq, axis(0))
    d.wall = T0 + 1_000
    assert te.TOPIC_BACKLOG_REQUESTED not in kinds(tick(d)) and d.state.gaps == GapRecovery()
    assert kinds(recalled(d, 12)) == []  # a stray read of a placed seq changes nothing


def test_a_stale_read_answer_does_not_undo_anything():
    d = gap_driver()
    d.wall = T0 + 61
    tick(d)
    before = d.state
    assert gap_read(d, 3, 5) == [] and d.state.gaps.cursor == 5 and d.state.gaps.asked == before.gaps.asked


def test_a_read_is_answered_once_the_projection_holds_the_range_or_is_past_it():
    from datetime import datetime as dt

    from streams.topics_memory.recall import Row, complete

    request = te.TopicBacklogRequested(from_seq=10, upto_seq=14, limit=3, ranges=[[10, 14]])
    row = Row(10, "user", "x", dt.now(UTC), "u", None, {})
    assert not complete([row], request, 13) and not complete([row], request)  # not at 14 yet
    # 14 projected, or left out as erased (the newest seq counts erased_messages), or a later seq.
    assert complete([row], request, 14) and complete([], request, 20)
    assert complete([row, row, row], request)  # a full read: settled through its last row
    assert complete([replace(row, seq=14)], request)


def test_the_erasure_check_takes_a_faust_message_s_seconds_and_a_record_s_milliseconds():
    from types import SimpleNamespace

    from domain.erasure import LogPosition
    from streams.topics_memory.erased import position

    assert position(SimpleNamespace(partition=2, offset=7, timestamp=1_750_000_000.123)) == LogPosition(
        2, 7, 1_750_000_000_123)
    assert position(SimpleNamespace(partition=2, offset=7, timestamp=1_750_000_000_123)) == LogPosition(
        2, 7, 1_750_000_000_123)


def test_the_erasure_check_waits_for_postgresql_instead_of_failing_the_fold():
    import asyncio
    from types import SimpleNamespace

    from domain.erasure_reads import ReadsUnavailable
    from streams.topics_memory.erased import ErasedCheck

    calls = []

    class Reads:  # the port (domain/erasure_reads.py) while PostgreSQL restarts
        async def count(self):
            calls.append("count")
            if len(calls) < 3:
                raise ReadsUnavailable("the database system is shutting down")
            return 0

        async def applied(self):
            calls.append("applied")
            return 0, []

    message = event(MESSAGE_APPENDED, MessageAppended(role="user", content="hi"), 3)
    check = ErasedCheck(Reads(), retry_s=0.001)
    record = SimpleNamespace(partition=0, offset=1, timestamp=1.0)
    assert asyncio.run(check.erasure_of(message, record)) is None
    assert calls == ["count", "count", "count", "applied"]  # 2 failed, count, rows


def test_the_erasure_snapshot_applies_the_domain_rule_by_user_and_by_conversation():
    from domain.erasure import AppliedErasure, LogPosition
    from streams.topics_memory.erased import ErasureSnapshot

    at = LogPosition(0, 10, 5_000)
    snapshot = ErasureSnapshot([AppliedErasure("e-user", "t", "alice", frozenset({"conv-a"}), LogPosition(1, 4, 6_000)),
                                AppliedErasure("e-conv", "t", None, frozenset({"conv-c"}), LogPosition(0, 11, 9_000))],
                               version=2)
    assert snapshot.erasure_of("t", "conv-b", "alice", at) == "e-user"  # her message in another's conversation
    assert snapshot.erasure_of("t", "conv-a", "bob", at) == "e-user"  # her conversation, erased whole
    assert snapshot.erasure_of("t", "conv-b", "alice", LogPosition(0, 12, 6_001)) is None  # written after it
    assert snapshot.erasure_of("t", "conv-c", "bob", at) == "e-conv"  # same partition: by offset
    assert snapshot.erasure_of("t", "conv-c", "bob", LogPosition(0, 11, 1)) is None
    assert snapshot.erasure_of("other", "conv-b", "alice", at) is None  # another tenant
    assert snapshot.erasure_of("t", "conv-b", "bob", at) is None


def test_system_and_tool_messages_are_seen_not_skipped():
    """A seq the fold saw but does not place (system, tool) is no gap: nothing to read back."""
    chat = Driver()
    chat.turn(0, axis(0))
    assert chat.say(2, "tool", "{\"temperature\": 21}") == []
    chat.say(3, "system", "You are a helpful assistant.")
    chat.turn(4, axis(0))
    assert chat.state.topics.skipped == ()
    assert not chat.state.topics.never_placed(2) and not chat.state.topics.never_placed(3)


def test_a_reply_left_unassigned_joins_its_turn_s_topic_once_the_late_user_message_is_placed():
    """The 477-of-480 takeover run (docs/backbone.md, "The takeover hole"): seq 0 (a user message)
    never reached the fold, seq 1 (its reply) did and found no active topic: "unassigned". The
    gap read placed seq 0 later, but seq 1 stayed without a topic for good."""
    d = Driver(config(embedding_timeout_s=60))
    assert d.say(1, "assistant", "noted") == [(te.TOPIC_MESSAGE_UNASSIGNED,
                                              te.TopicMessageUnassigned(seq=1, reason="no active topic"))]
    assert d.state.topics.skipped == ((0, 0),)
    d.wall = T0 + 61
    assert te.TOPIC_BACKLOG_REQUESTED in kinds(tick(d))
    placed = recalled(d, 0)
    assigned = {p.seq: p.topic_id for t, p in placed if t == te.TOPIC_MESSAGE_ASSIGNED}
    assert assigned.get(0) is not None and assigned.get(1) == assigned[0]


def test_a_waiting_reply_joins_the_topic_of_the_newest_user_message_below_it_not_the_active_one():
    """Seqs 0-2 passed over (user, reply, user), reply 3 left unassigned: user 0 read back first
    makes 3 wait (1 and 2 are still passed over); user 2, in another topic than the active one,
    is 3's turn. The reply's event carries no text (the fold keeps none): the projector takes it
    from the log."""
    d = Driver(config())
    d.say(3, "assistant", "noted")
    assert [s for s, *_ in d.state.topics.waiting_replies] == [3] and d.state.topics.unassigned_count == 1
    first = d.recall(0, "user", "about cats", after_seq=-1, embedding=axis(0))
    assert 3 not in {p.seq for t, p in first if t == te.TOPIC_MESSAGE_ASSIGNED}
    d.recall(1, "assistant", "cats purr", after_seq=0)
    placed = d.recall(2, "user", "about boats", after_seq=1, embedding=axis(1))
    assigned = {p.seq: p for t, p in placed if t == te.TOPIC_MESSAGE_ASSIGNED}
    assert assigned[3].topic_id == assigned[2].topic_id != d.state.topics.active_topic_id
    assert assigned[3].content_from_log and assigned[3].role == "assistant" and assigned[3].content == ""
    topic = d.state.topics.topic(assigned[2].topic_id)
    assert [m.seq for m in topic.messages] == [2, 3] and topic.message_count == 2
    assert d.state.topics.waiting_replies == () and d.state.topics.unassigned_count == 0


def test_the_fold_remembers_only_the_newest_waiting_replies():
    from domain.topics.state import MAX_WAITING_REPLIES

    d = Driver(config())
    extra = 3
    for seq in range(1, MAX_WAITING_REPLIES + extra + 1):
        d.say(seq, "assistant", f"reply {seq}")
    assert [s for s, *_ in d.state.topics.waiting_replies] == list(range(extra + 1, MAX_WAITING_REPLIES + extra + 1))
    placed = d.recall(0, "user", "hello", after_seq=-1, embedding=axis(0))
    assigned = sorted(p.seq for t, p in placed if t == te.TOPIC_MESSAGE_ASSIGNED)
    assert assigned == [0] + list(range(extra + 1, MAX_WAITING_REPLIES + extra + 1))  # the oldest stay unassigned
    assert d.state.topics.unassigned_count == extra and d.state.topics.waiting_replies == ()


def test_a_reply_with_nothing_passed_over_below_it_is_not_remembered_and_old_states_load():
    from streams.topics_memory import codec
    import orjson

    d = Driver(config())
    d.say(0, "assistant", "welcome")  # a greeting before any user message: no turn will ever come
    assert d.state.topics.waiting_replies == () and b"waiting_replies" not in codec.dumps(d.state)
    d.say(2, "assistant", "noted")
    raw = codec.dumps(d.state)
    assert codec.loads(raw, "c").topics.waiting_replies == ((2, T0 + 2, -1, ""),)
    data = orjson.loads(raw)
    del data["topics"]["waiting_replies"]  # a state stored before issue 22
    assert codec.loads(orjson.dumps(data), "c").topics.waiting_replies == ()

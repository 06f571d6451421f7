"""The topic agent's shell (no Kafka): events in, topic events out, embeddings awaited in log order."""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from core.settings import Settings, TopicSettings
from schemas import topic_events as te
from schemas.codec import decode, encode, new_event, peek_type
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.topics_memory import codec
from domain.topics import inbox as box
from domain.topics.state import MAX_SKIPPED, TopicsState
from streams.topics_memory.agent import AgentConfig, handle, needs_tick

DIM = 8
T0 = 1_750_000_000.0


def axis(i: int) -> list[float]:
    return [1.0 if k == i else 0.0 for k in range(DIM)]


def config(**topics) -> AgentConfig:
    """Seed 004's matching (0.7, no active-topic bonus) unless a test sets it: the axis vectors
    below are chosen around it, not around the offline model's defaults."""
    topics = {"similarity_threshold": 0.7, "active_topic_bonus": 0.0} | topics
    return AgentConfig.from_settings(Settings(topics=TopicSettings(**topics)), model="m", prompt_version="p-v1")


def event(type_: str, payload, seq: int | None, at: float = T0):
    envelope = new_event(type_, payload, tenant_id="t", conversation_id="c", user_id="u", seq=seq,
                         occurred_at=datetime.fromtimestamp(at, UTC))
    return decode(encode(envelope))  # what the agent gets from Kafka


class Driver:
    """Feeds one conversation's events to `handle`; keeps the state and every event emitted."""

    def __init__(self, cfg: AgentConfig | None = None) -> None:
        self.cfg, self.state, self.out, self.wall = cfg or config(), codec.loads(None, "c"), [], T0
        self.through_codec = True

    def feed(self, ev) -> list:
        # Through the changelog codec every time, as the faust agent does.
        state = codec.loads(codec.dumps(self.state), "c") if self.through_codec else self.state
        self.state, emitted = handle(self.cfg, state, ev, self.wall)
        self.out += emitted
        return [(e.type, e.payload) for e in (decode(encode(envelope)) for envelope in emitted)]

    def say(self, seq: int, role: str, content: str, at: float | None = None, **metadata) -> list:
        payload = MessageAppended(role=role, content=content, metadata=metadata)
        return self.feed(event(MESSAGE_APPENDED, payload, seq, T0 + seq if at is None else at))

    def embed(self, seq: int, vector: list[float], attempt: int = 1) -> list:
        return self.feed(event(te.TOPIC_MESSAGE_EMBEDDED,
                               te.TopicMessageEmbedded(seq=seq, attempt=attempt, embedding=vector, model="m"), seq))

    def recall(self, seq: int, role: str, content: str, after_seq: int, embedding: list[float] | None = None,
               error: str | None = None) -> list:
        payload = te.TopicMessageRecalled(seq=seq, after_seq=after_seq, role=role, content=content,
                                          occurred_at=datetime.fromtimestamp(T0 + seq, UTC), embedding=embedding,
                                          model="m" if embedding else None, error=error)
        return self.feed(event(te.TOPIC_MESSAGE_RECALLED, payload, seq, T0 + seq))

    def backlog_read(self, through_seq: int, last_recalled_seq: int, from_seq: int = 0) -> list:
        payload = te.TopicBacklogRead(from_seq=from_seq, through_seq=through_seq, last_recalled_seq=last_recalled_seq,
                                      count=1)
        return self.feed(event(te.TOPIC_BACKLOG_READ, payload, None))

    def turn(self, seq: int, vector: list[float], text: str = "") -> list:
        return (self.say(seq, "user", text or f"question {seq}") + self.embed(seq, vector)
                + self.say(seq + 1, "assistant", f"answer {seq + 1}"))

    def types(self) -> list[str]:
        return [e.type for e in self.out]


def kinds(emitted) -> list[str]:
    return [t for t, _ in emitted]


def test_a_user_message_waits_for_its_embedding_and_the_reply_waits_behind_it():
    d = Driver()
    (request,) = d.say(0, "user", "How do I make carbonara?")
    assert request == (te.TOPIC_EMBEDDING_REQUESTED,
                       te.TopicEmbeddingRequested(seq=0, content="How do I make carbonara?", attempt=1))
    assert d.say(1, "assistant", "Eggs, pecorino, guanciale.") == []  # held behind seq 0
    placed = d.embed(0, axis(0))
    assert kinds(placed) == [te.TOPIC_CREATED, te.TOPIC_ACTIVATED, te.TOPIC_MESSAGE_ASSIGNED,
                             te.TOPIC_MESSAGE_ASSIGNED]
    created, _, user, reply = (p for _, p in placed)
    assert created.title == "How do I make carbonara?" and created.topic_id == "c:topic-1"
    assert (user.seq, user.role, user.matched, reply.seq, reply.role) == (0, "user", True, 1, "assistant")
    assert reply.topic.message_count == 2 and d.state.inbox.queue == ()


def test_events_carry_the_envelope_of_the_message_they_place():
    d = Driver()
    d.turn(0, axis(0))
    assigned = [e for e in d.out if e.type == te.TOPIC_MESSAGE_ASSIGNED]
    assert [(e.seq, e.conversation_id, e.user_id) for e in assigned] == [
        (0, "c", "u"), (1, "c", "u")]


def test_decay_runs_on_event_time_not_on_the_wall_clock():
    d = Driver()
    d.wall = T0 + 10 * 86400  # the agent processes the message ten days late (a replay)
    d.say(0, "user", "hello", at=T0)
    (_, _, (_, assigned)) = d.embed(0, axis(0))[:3]
    assert assigned.topic.last_active_at == datetime.fromtimestamp(T0, UTC)
    assert d.state.clock == T0


def test_a_similar_message_joins_and_a_new_subject_starts_a_topic():
    d = Driver(config(center_on_conversation=False))  # plain cosines: the seed's rule (centred: test_topic_fold)
    d.turn(0, axis(0), "carbonara")
    joined = d.say(2, "user", "more carbonara") + d.embed(2, [0.9, math.sqrt(1 - 0.81)] + [0.0] * (DIM - 2))
    assert kinds(joined) == [te.TOPIC_EMBEDDING_REQUESTED, te.TOPIC_MESSAGE_ASSIGNED]
    assert joined[1][1].similarity == pytest.approx(0.9, abs=1e-6) and joined[1][1].topic.access_count == 1
    switched = d.say(3, "user", "my car brakes squeak") + d.embed(3, axis(1))
    assert kinds(switched)[1:] == [te.TOPIC_CREATED, te.TOPIC_ACTIVATED, te.TOPIC_MESSAGE_ASSIGNED]
    assert switched[2][1].previous_topic_id == "c:topic-1"


def test_system_and_tool_messages_belong_to_no_topic():
    d = Driver()
    assert d.say(0, "system", "You are helpful.") == [] and d.say(1, "tool", "{}") == []
    empty = codec.loads(None, "c")
    assert d.state.topics == replace(empty.topics, last_seq=1, placements=2)  # seen (no gap), placed nowhere
    assert d.state.inbox == empty.inbox


def test_importance_comes_from_the_message_metadata():
    d = Driver()
    d.say(0, "user", "urgent", importance=0.9)
    created = d.embed(0, axis(0))[0][1]
    assert created.importance == 0.9


def test_compaction_is_requested_with_the_seqs_and_applied_when_it_comes_back():
    d = Driver(config(max_messages_per_topic=6, recent_message_keep=2))
    for seq in range(0, 6, 2):
        d.turn(seq, axis(0))
    assert te.TOPIC_COMPACTION_REQUESTED not in d.types()
    emitted = d.say(6, "user", "seventh") + d.embed(6, axis(0))
    request = next(p for t, p in emitted if t == te.TOPIC_COMPACTION_REQUESTED)
    assert (request.seqs, request.upto_seq, request.previous_summary, request.prompt_version) == (
        [0, 1, 2, 3, 4], 4, None, "p-v1")
    done = te.TopicCompacted(topic_id="c:topic-1", upto_seq=4, archived_seqs=[0, 1, 2, 3, 4], summary="S1",
                             prompt_version="p-v1", model="m", generation_time_ms=5)
    assert d.feed(event(te.TOPIC_COMPACTED, done, 6)) == []
    (topic,) = d.state.topics.topics
    assert [m.seq for m in topic.messages] == [5, 6] and topic.summary == "S1" and topic.archived_count == 5


def test_a_topic_with_an_archive_coming_back_asks_for_a_restore():
    d = Driver(config(max_messages_per_topic=2, recent_message_keep=1))
    d.turn(0, axis(0))
    d.say(2, "user", "again") + d.embed(2, axis(0))
    done = te.TopicCompacted(topic_id="c:topic-1", upto_seq=1, archived_seqs=[0, 1], summary="S",
                             prompt_version="p-v1", model="m", generation_time_ms=1)
    d.feed(event(te.TOPIC_COMPACTED, done, 2))
    d.say(3, "user", "other") + d.embed(3, axis(1))
    back = d.say(4, "user", "back") + d.embed(4, axis(0))
    assert kinds(back)[1:3] == [te.TOPIC_ACTIVATED, te.TOPIC_ARCHIVE_RESTORE_REQUESTED]
    assert back[2][1] == te.TopicArchiveRestoreRequested(topic_id="c:topic-1", seq=4, archived_count=2,
                                                         archived_upto_seq=1)


def test_a_redelivered_message_reasserts_where_it_went():
    d = Driver()
    d.turn(0, axis(0))
    again = d.say(1, "assistant", "answer 1")
    assert kinds(again) == [te.TOPIC_MESSAGE_ASSIGNED] and again[0][1].seq == 1
    assert again[0][1].content_from_log is True and again[0][1].content == ""  # the fold keeps no text
    assert d.say(5, "user", "new") and d.say(5, "user", "new") == []  # waiting: nothing to say yet


def test_a_failed_embedding_is_retried_then_the_message_joins_the_active_topic_unmatched():
    d = Driver(config(embedding_max_attempts=2))
    d.turn(0, axis(0))
    d.say(2, "user", "unembeddable")
    failure = te.TopicEmbeddingFailed(seq=2, attempt=1, error="503", retryable=True)
    assert d.feed(event(te.TOPIC_EMBEDDING_FAILED, failure, 2)) == [
        (te.TOPIC_EMBEDDING_REQUESTED, te.TopicEmbeddingRequested(seq=2, content="unembeddable", attempt=2))]
    stale = d.feed(event(te.TOPIC_EMBEDDING_FAILED, failure, 2))  # attempt 1 again: not the latest
    assert stale == []
    final = d.feed(event(te.TOPIC_EMBEDDING_FAILED, failure.model_copy(update={'attempt': 2}), 2))
    ((kind, assigned),) = final
    assert kind == te.TOPIC_MESSAGE_ASSIGNED and (assigned.seq, assigned.matched, assigned.role) == (2, False, "user")


def test_a_non_retryable_failure_before_any_topic_is_reported_unassigned():
    d = Driver()
    d.say(0, "user", "")
    failure = te.TopicEmbeddingFailed(seq=0, attempt=1, error="zero vector", retryable=False)
    ((kind, unassigned),) = d.feed(event(te.TOPIC_EMBEDDING_FAILED, failure, 0))
    assert kind == te.TOPIC_MESSAGE_UNASSIGNED and "zero vector" in unassigned.reason


def test_a_lost_embedding_request_is_reissued_on_a_tick_after_the_timeout():
    d = Driver(config(embedding_timeout_s=60))
    d.say(0, "user", "hello")
    tick = event(te.TOPIC_TICKED, te.TopicTicked(), None)
    assert not needs_tick(d.state, T0 + 60, d.cfg) and d.feed(tick) == []
    d.wall = T0 + 61
    assert needs_tick(d.state, d.wall, d.cfg)
    assert d.feed(tick) == [(te.TOPIC_EMBEDDING_REQUESTED,
                             te.TopicEmbeddingRequested(seq=0, content="hello", attempt=2))]
    assert kinds(d.embed(0, axis(0), attempt=1))[0] == te.TOPIC_CREATED  # a late first answer still counts


def test_a_full_inbox_defers_messages_and_reads_them_back_in_order_dropping_none():
    d = Driver(config(max_waiting_messages=3))
    d.turn(0, axis(0))
    assert d.say(2, "user", "waits for its vector") and d.say(3, "assistant", "a") == [] == d.say(4, "assistant", "b")
    assert d.say(5, "assistant", "c") == [] == d.say(6, "user", "d")  # full: deferred, not held, nothing asked
    assert d.state.inbox.backlog == box.Backlog(5, 6) and len(d.state.inbox.queue) == 3
    assert d.say(5, "assistant", "c") == []  # a redelivered deferred message changes nothing
    placed = d.embed(2, axis(0))  # the held ones are placed, then the deferred ones are asked for
    assert [(t, getattr(p, "seq", None)) for t, p in placed] == [(te.TOPIC_MESSAGE_ASSIGNED, s) for s in (2, 3, 4)] + [
        (te.TOPIC_BACKLOG_REQUESTED, None)]
    assert placed[-1][1] == te.TopicBacklogRequested(from_seq=5, upto_seq=6, limit=100, attempt=1, final=False)
    assert d.say(7, "assistant", "e") == []  # still deferring: log order is kept
    assert d.recall(6, "user", "d", after_seq=5, embedding=axis(0)) == []  # out of order (5 not yet): ignored
    back = d.recall(5, "assistant", "c", after_seq=4) + d.recall(6, "user", "d", after_seq=5, embedding=axis(0))
    assert [(p.seq, p.matched, p.content) for _, p in back] == [(5, True, "c"), (6, True, "d")]
    assert d.recall(5, "assistant", "c", after_seq=4) == []  # a duplicate read changes nothing
    more = d.backlog_read(through_seq=6, last_recalled_seq=6)
    assert more == [(te.TOPIC_BACKLOG_REQUESTED, te.TopicBacklogRequested(from_seq=7, upto_seq=7, limit=100,
                                                                         attempt=1, final=False))]
    assert [p.seq for _, p in d.recall(7, "assistant", "e", after_seq=6)] == [7]
    assert d.state.inbox == box.Inbox() and te.TOPIC_MESSAGE_UNASSIGNED not in d.types()
    assert kinds(d.say(8, "user", "live again")) == [te.TOPIC_EMBEDDING_REQUESTED]


def test_a_backlog_read_with_no_answer_is_asked_again_and_its_last_attempt_is_final():
    d = Driver(config(max_waiting_messages=1, embedding_timeout_s=60, embedding_max_attempts=2))
    d.say(0, "user", "first")
    d.say(1, "user", "deferred")
    (_, read) = d.embed(0, axis(0))[-1]
    assert (read.from_seq, read.attempt, read.final) == (1, 1, False)
    tick = event(te.TOPIC_TICKED, te.TopicTicked(), None)
    d.wall = T0 + 30
    assert not needs_tick(d.state, d.wall, d.cfg) and d.feed(tick) == []
    d.wall = T0 + 61
    assert needs_tick(d.state, d.wall, d.cfg)
    (_, again), = d.feed(tick)
    assert (again.from_seq, again.attempt, again.final) == (1, 2, True)
    # The final read sends an unembeddable message without a vector: placed unmatched, not dropped.
    (assigned,) = d.recall(1, "user", "deferred", after_seq=0, error="embedding failed: boom")
    assert (assigned[1].seq, assigned[1].matched, assigned[1].topic_id) == (1, False, "c:topic-1")


def test_a_stuck_compaction_makes_the_conversation_need_a_tick():
    d = Driver(config(max_messages_per_topic=2, recent_message_keep=1, compaction_timeout_s=300))
    d.turn(0, axis(0))
    d.say(2, "user", "third") + d.embed(2, axis(0))
    assert not needs_tick(d.state, T0 + 300, d.cfg) and needs_tick(d.state, T0 + 301, d.cfg)
    d.wall = T0 + 301
    emitted = d.feed(event(te.TOPIC_TICKED, te.TopicTicked(), None))
    assert kinds(emitted) == [te.TOPIC_COMPACTION_REQUESTED] and emitted[0][1].attempt == 2


def test_every_emitted_event_decodes_against_its_schema():
    d = Driver(config(max_messages_per_topic=2, recent_message_keep=1))
    for seq in range(0, 8, 2):
        d.turn(seq, axis(seq % 3))
    assert {te.TOPIC_CREATED, te.TOPIC_COMPACTION_REQUESTED, te.TOPIC_MESSAGE_ASSIGNED} <= set(d.types())
    for envelope in d.out:
        assert decode(encode(envelope)).type == envelope.type
        assert peek_type(encode(envelope)) == envelope.type


def test_event_type_peeks_without_parsing_and_defers_odd_shapes():
    assert peek_type(b'{"type":"topic.ticked","schema_version":1}') == "topic.ticked"
    assert peek_type(b'{"schema_version":1,"type":"x"}') is None and peek_type(None) is None


def test_the_changelog_codec_packs_vectors_and_round_trips():
    d = Driver()
    d.turn(0, [0.1 * k for k in range(1, DIM + 1)])
    d.say(2, "user", "waiting")
    d.embed(3, axis(1))  # not asked for: ignored
    raw = codec.dumps(d.state)
    again = codec.loads(raw, "c")
    assert codec.dumps(again) == raw and again.inbox == d.state.inbox
    assert again.topics.topics[0].centroid == pytest.approx(d.state.topics.topics[0].centroid, rel=1e-6)
    assert b"centroid" in raw and len(raw) < 2000


def test_the_decoded_state_cache_is_only_used_for_the_very_bytes_it_came_from():
    d = Driver()
    d.turn(0, axis(0))
    raw = codec.dumps(d.state)
    cache = codec.DecodedCache(capacity=1)
    first = cache.get(b"t/c", raw, "c")
    assert cache.get(b"t/c", raw, "c") is first  # same bytes object: no decode
    assert cache.get(b"t/c", bytes(bytearray(raw)), "c") is not first  # replaced (recovery, rebalance)
    assert cache.get(b"t/c", bytes(bytearray(raw)), "c") == first
    assert cache.get(b"t/other", None, "other").topics.conversation_id == "other"
    cache.put(b"t/x", raw, first)  # capacity 1: the older entry leaves
    assert cache.get(b"t/c", raw, "c") is not first


def test_the_fold_state_keeps_no_message_text_but_the_events_do():
    d = Driver()
    d.turn(0, axis(0), "How do I make carbonara?")
    (topic,) = d.state.topics.topics
    assert topic.title == "How do I make carbonara?" and [m.content for m in topic.messages] == ["", ""]
    texts = [decode(encode(e)).payload.content for e in d.out if e.type == te.TOPIC_MESSAGE_ASSIGNED]
    assert texts == ["How do I make carbonara?", "answer 1"]


def test_the_text_held_is_bounded_too_then_it_is_deferred():
    d = Driver()
    d.cfg = replace(d.cfg, inbox=replace(d.cfg.inbox, max_waiting_chars=1_000))
    d.turn(0, axis(0))
    d.say(2, "user", "x" * 600)
    assert d.say(3, "assistant", "y" * 600) == []  # 1,400 characters would be held: deferred
    assert [w.seq for w in d.state.inbox.queue] == [2] and d.state.inbox.backlog == box.Backlog(3, 3)
    assert kinds(d.embed(2, axis(0)))[-1] == te.TOPIC_BACKLOG_REQUESTED


def test_a_backlog_of_thousands_keeps_the_state_small_and_places_every_message_in_order():
    """Issue 16: a bulk ingest (5,000 messages far faster than embeddings) ends with every
    message in a topic and none unassigned; the changelog record stays far below 1 MiB."""
    d, log, vectors = Driver(config()), {}, {}
    d.through_codec, largest = False, 0  # the state's bytes are measured below, not round-tripped each time
    for seq in range(5_000):
        role = "user" if seq % 2 == 0 else "assistant"
        log[seq] = (role, f"{role} {seq} " + "words " * 40)
        vectors[seq] = axis((seq // 200) % 4)  # four subjects, in runs
        d.say(seq, role, log[seq][1])
        if seq % 50 == 0 or seq < 150:
            largest = max(largest, len(codec.dumps(d.state)))
    assert largest < 400_000, largest  # at most max_waiting messages (and their text) are ever held
    assert d.state.inbox.backlog is not None and d.state.inbox.backlog.last_seq == 4_999
    # The stages' side: embed what is asked for, read back what was deferred, until quiet.
    pending = deque(d.out)
    while pending:
        request = pending.popleft()
        before = len(d.out)
        if request.type == te.TOPIC_EMBEDDING_REQUESTED:
            d.embed(request.seq, vectors[request.seq])
        elif request.type == te.TOPIC_BACKLOG_REQUESTED:
            ask = decode(encode(request)).payload
            seqs = [s for s in range(ask.from_seq, ask.upto_seq + 1)][: ask.limit]
            after = ask.from_seq - 1
            for seq in seqs:
                role, content = log[seq]
                d.recall(seq, role, content, after_seq=after, embedding=vectors[seq] if role == "user" else None)
                after = seq
            d.backlog_read(through_seq=seqs[-1], last_recalled_seq=seqs[-1], from_seq=ask.from_seq)
        elif request.type == te.TOPIC_COMPACTION_REQUESTED:
            ask = decode(encode(request)).payload
            done = te.TopicCompacted(topic_id=ask.topic_id, upto_seq=ask.upto_seq, archived_seqs=ask.seqs,
                                     summary="s", prompt_version="p-v1", model="m", generation_time_ms=1)
            d.feed(event(te.TOPIC_COMPACTED, done, request.seq))
        pending.extend(d.out[before:])
        if len(d.out) % 20 == 0:
            largest = max(largest, len(codec.dumps(d.state)))
    assigned = [e.seq for e in d.out if e.type == te.TOPIC_MESSAGE_ASSIGNED]
    assert assigned == list(range(5_000)) and te.TOPIC_MESSAGE_UNASSIGNED not in d.types()
    assert d.state.inbox == box.Inbox() and largest < 400_000
    assert len(codec.dumps(d.state)) < 60_000  # compacted: four topics, their newest few messages
    assert len([e for e in d.out if e.type == te.TOPIC_CREATED]) >= 4




def test_an_erasure_in_the_conversation_derives_its_topics_again_from_the_remaining_messages():
    """After an erasure deleted a mixed conversation's topics, the fold starts afresh and reads
    every message seen so far back from the projected log (the erased ones are gone from it):
    the remaining messages are placed again, in order, under new topic ids; a redelivered
    request changes nothing."""
    from schemas.erasure_events import REDERIVE_REQUESTED, RederiveRequested

    d = Driver()
    d.turn(0, axis(0), "lisbon flat")
    d.turn(2, axis(1), "marker words of the erased user")
    before = {t.topic_id for t in d.state.topics.topics}
    assert len(before) == 2 and d.state.topics.last_seq == 3

    request = event(REDERIVE_REQUESTED, RederiveRequested(erasure_event_id="er-1", first_seq=2, erased_seqs=[2]), None)
    emitted = d.feed(request)
    assert emitted == [(te.TOPIC_BACKLOG_REQUESTED, te.TopicBacklogRequested(from_seq=0, upto_seq=3, limit=100,
                                                                             attempt=1, final=False))]
    assert d.state.topics.topics == () and d.state.topics.last_seq == -1 and d.state.last_rederive == "er-1"
    assert d.feed(request) == []  # redelivered: nothing again

    # The recall stage answers with what remains (seq 2, the erased user's, is gone).
    d.recall(0, "user", "lisbon flat", after_seq=-1, embedding=axis(0))
    d.recall(1, "assistant", "answer 1", after_seq=0)
    d.recall(3, "assistant", "answer 3", after_seq=1)
    d.backlog_read(through_seq=3, last_recalled_seq=3)
    assert d.state.inbox.backlog is None and d.state.topics.last_seq == 3
    [topic] = d.state.topics.topics
    assert topic.topic_id not in before  # numbering went on: no id of a deleted topic comes back
    assert [m.seq for m in topic.messages] == [0, 1, 3]
    d.say(4, "user", "a new question")  # live messages go on after the re-derivation
    d.embed(4, axis(0))
    assert d.state.topics.last_seq == 4


def test_the_position_remembers_the_seqs_it_passed_over_and_takes_each_once():
    """The pure rule: at or below the fold's position a seq is a redelivery, unless the fold
    passed over it without seeing it; the newest MAX_SKIPPED such ranges are kept."""
    state = TopicsState().placing(0).placing(3).placing(4).placing(9)
    assert (state.last_seq, state.skipped) == (9, ((1, 2), (5, 8)))
    assert [s for s in range(11) if state.never_placed(s)] == [1, 2, 5, 6, 7, 8, 10]
    state = state.placing(6)  # late: taken out of its range, the position stays
    assert (state.last_seq, state.skipped) == (9, ((1, 2), (5, 5), (7, 8)))
    assert not state.never_placed(6) and state.never_placed(5)
    assert TopicsState.from_dict(json.loads(json.dumps(state.to_dict()))) == state  # through the changelog
    many = TopicsState()
    for seq in range(0, 4 * MAX_SKIPPED, 2):
        many = many.placing(seq)
    assert len(many.skipped) == MAX_SKIPPED and many.skipped[-1] == (4 * MAX_SKIPPED - 3,) * 2
    assert not many.never_placed(1)  # passed over too long ago: taken for a redelivery


def test_after_a_takeover_earlier_messages_delivered_after_later_ones_are_all_placed_once():
    """What a survivor's fold saw in tests/integration/test_two_workers.py: a conversation's
    later messages first, then the earlier ones it had never seen. Each is placed, none twice,
    none unassigned; a second redelivery of all of them changes nothing."""
    d = Driver()
    d.turn(0, axis(0))
    d.turn(6, axis(0))  # seqs 2-5 not delivered yet
    d.turn(2, axis(0))  # ...then they come
    d.turn(4, axis(0))
    placed = [decode(encode(e)).payload.seq for e in d.out if e.type == te.TOPIC_MESSAGE_ASSIGNED]
    assert sorted(placed) == list(range(8)) and len(placed) == 8
    assert te.TOPIC_MESSAGE_UNASSIGNED not in d.types()
    (topic,) = d.state.topics.topics
    assert [m.seq for m in topic.messages] == list(range(8)) and topic.message_count == 8  # in seq order
    assert d.state.topics.last_seq == 7 and d.state.topics.skipped == ()
    for seq in range(8):  # redelivered again: where each went is said again, nothing placed
        again = d.say(seq, "user" if seq % 2 == 0 else "assistant", "again")
        assert kinds(again) == [te.TOPIC_MESSAGE_ASSIGNED] and again[0][1].content_from_log
    assert d.state.topics.topics[0].message_count == 8


def test_a_late_message_waiting_behind_a_later_one_is_placed_after_it():
    """Both held in the inbox (the later one delivered first): it used to be filed as late."""
    d = Driver()
    d.turn(0, axis(0))
    d.say(4, "user", "later")
    d.say(2, "user", "earlier")
    placed = d.embed(4, axis(0)) + d.embed(2, axis(0))
    assert [p.seq for t, p in placed if t == te.TOPIC_MESSAGE_ASSIGNED] == [4, 2]
    assert te.TOPIC_MESSAGE_UNASSIGNED not in d.types() and d.state.topics.skipped == ((3, 3),)


def test_a_late_message_on_another_subject_starts_its_topic_but_the_newer_turn_stays_active():
    d = Driver()
    d.turn(0, axis(0))
    d.turn(4, axis(0))
    late = d.say(2, "user", "another subject") + d.embed(2, axis(1))
    assert kinds(late) == [te.TOPIC_EMBEDDING_REQUESTED, te.TOPIC_CREATED, te.TOPIC_MESSAGE_ASSIGNED]  # not activated
    assert d.state.topics.active_topic_id == "c:topic-1" and len(d.state.topics.topics) == 2


def test_a_message_older_than_the_deferred_range_is_held_not_swallowed():
    d = Driver(config(max_waiting_messages=1))
    d.turn(0, axis(0))
    d.say(4, "user", "held")
    d.say(5, "assistant", "deferred")
    assert d.state.inbox.backlog == box.Backlog(5, 5)
    assert kinds(d.say(2, "user", "late")) == [te.TOPIC_EMBEDDING_REQUESTED]  # held past the bound
    assert [w.seq for w in d.state.inbox.queue] == [4, 2] and d.state.inbox.backlog == box.Backlog(5, 5)
    placed = d.embed(4, axis(0)) + d.embed(2, axis(0))
    assert [p.seq for t, p in placed if t == te.TOPIC_MESSAGE_ASSIGNED] == [4, 2]
    assert placed[-1][0] == te.TOPIC_BACKLOG_REQUESTED  # then the deferred range, as before

"""Rules of the topic fold (seed 004): matching, titles, compaction, restore, eviction, state."""

from __future__ import annotations

import json
import math
import random

import pytest

from streams.topics_memory import (
    ArchiveRestoreRequested,
    AssistantMessage,
    CompactionDone,
    CompactionFailed,
    CompactionRequested,
    MessageAssigned,
    MessageUnassigned,
    Tick,
    Topic,
    TopicActivated,
    TopicConfig,
    TopicCreated,
    TopicEvicted,
    TopicMessage,
    TopicsState,
    UserMessage,
    best_match,
    step,
    topic_priority,
    topic_stats,
    unit_vector,
)

CFG = TopicConfig()
DAY = 86400.0
DIM = 32


def axis(i: int, dim: int = DIM) -> list[float]:
    return [1.0 if k == i else 0.0 for k in range(dim)]


def at_cosine(c: float, dim: int = DIM) -> list[float]:
    """A unit vector whose cosine with axis(0) is c."""
    return [c, math.sqrt(1 - c * c)] + [0.0] * (dim - 2)


def run(inputs, state=None, config=CFG):
    """Feed (input, now) pairs; return the final state and every command emitted."""
    state = state or TopicsState("conv")
    emitted = []
    for observed, now in inputs:
        state, commands = step(state, observed, now, config)
        emitted.extend(commands)
    return state, emitted


class Chat:
    """Numbers messages like the log does: one seq per message, in order."""

    def __init__(self, state=None, config=CFG):
        self.state, self.config, self.seq, self.emitted = state or TopicsState("conv"), config, 0, []

    def send(self, observed, now):
        self.state, commands = step(self.state, observed, now, self.config)
        self.emitted.extend(commands)
        return list(commands)

    def user(self, embedding, now=0.0, content=None, importance=None):
        seq, self.seq = self.seq, self.seq + 1
        return self.send(UserMessage(seq, content or f"user message {seq}", embedding, now, importance), now)

    def assistant(self, now=0.0, content=None):
        seq, self.seq = self.seq, self.seq + 1
        return self.send(AssistantMessage(seq, content or f"assistant reply {seq}", now), now)

    def turns(self, embedding, count, now=0.0):
        """`count` messages alternating user/assistant; returns the commands."""
        out = []
        for i in range(count):
            out += self.user(embedding, now) if i % 2 == 0 else self.assistant(now)
        return out


def of_type(commands, kind):
    return [c for c in commands if isinstance(c, kind)]


# --- matching --------------------------------------------------------------------------------

def test_a_similar_message_joins_the_topic_and_refreshes_it():
    chat = Chat()
    first = chat.user(axis(0), now=10.0, content="How do I reset my router?")
    assert first == [TopicCreated("conv:topic-1", "How do I reset my router?", 0),
                     TopicActivated("conv:topic-1", None), MessageAssigned("conv:topic-1", 0, None)]
    second = chat.user(at_cosine(0.9), now=50.0)
    assert second == [MessageAssigned("conv:topic-1", 1, pytest.approx(0.9))]
    (topic,) = chat.state.topics
    assert (topic.access_count, topic.last_active_at, topic.created_at, topic.message_count) == (1, 50.0, 10.0, 2)


def test_a_dissimilar_message_starts_and_activates_a_new_topic():
    chat = Chat()
    chat.user(axis(0))
    commands = chat.user(axis(1), content="Different subject")
    assert commands == [TopicCreated("conv:topic-2", "Different subject", 1),
                        TopicActivated("conv:topic-2", "conv:topic-1"), MessageAssigned("conv:topic-2", 1, None)]
    assert [t.access_count for t in chat.state.topics] == [0, 0]
    assert chat.state.active_topic_id == "conv:topic-2"


@pytest.mark.parametrize(("cosine", "threshold", "joins"),
                         [(0.71, 0.7, True), (0.69, 0.7, False), (0.6, 0.6, False), (0.6, 0.59, True)])
def test_similarity_must_exceed_the_threshold(cosine, threshold, joins):
    config = TopicConfig(similarity_threshold=threshold)
    chat = Chat(config=config)
    chat.user(axis(0))
    # (3, 4) / 5 has cosine exactly 0.6 with the first axis: the boundary itself.
    embedding = [3.0, 4.0] + [0.0] * (DIM - 2) if cosine == 0.6 else at_cosine(cosine)
    assert best_match(chat.state, unit_vector(embedding))[1] == pytest.approx(cosine, abs=1e-15)
    chat.user(embedding)
    assert len(chat.state.topics) == (1 if joins else 2)  # seed 004: "similarity > threshold"


def test_the_best_of_several_topics_wins():
    chat = Chat()
    chat.user(axis(0))
    chat.user(axis(1))
    chat.user([0.2, 0.98] + [0.0] * (DIM - 2))
    assert [len(t.messages) for t in chat.state.topics] == [1, 2]


def test_centroid_is_the_renormalised_running_mean_of_user_embeddings():
    chat = Chat()
    chat.user(axis(0))
    chat.assistant()  # replies carry no embedding and do not move the centroid
    chat.user(at_cosine(0.8))
    chat.user(at_cosine(0.8))
    mean = unit_vector([1 + 0.8 + 0.8, 0.6 + 0.6] + [0.0] * (DIM - 2))
    (topic,) = chat.state.topics
    assert topic.centroid == pytest.approx(list(mean)) and topic.embedding_count == 3


@pytest.mark.parametrize("bad", [[0.0] * DIM, [], [math.nan] + [1.0] * (DIM - 1)])
def test_an_unusable_embedding_is_refused(bad):
    with pytest.raises(ValueError):
        step(TopicsState("conv"), UserMessage(0, "x", bad, 0.0), 0.0, CFG)


def test_an_embedding_of_another_dimension_is_refused():
    chat = Chat()
    chat.user(axis(0))
    with pytest.raises(ValueError, match="dimensions"):
        chat.user(axis(0, dim=8))


def test_importance_is_taken_from_the_message_and_clamped():
    chat = Chat()
    chat.user(axis(0))
    assert chat.state.topics[0].importance == 0.5  # seed default
    chat.user(axis(0), importance=0.9)
    assert chat.state.topics[0].importance == 0.9
    chat.user(axis(0))  # no importance: unchanged
    assert chat.state.topics[0].importance == 0.9
    chat.user(axis(1), importance=7.0)
    assert chat.state.topics[1].importance == 1.0


# --- titles ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("content", "title"), [
    ("Short question?", "Short question?"),
    ("x" * 200, "x" * 79 + "…"),
    ("a" * 80, "a" * 80),
    ("  Line one\n\nline   two  ", "Line one line two"),  # whitespace collapsed for display
    ("Hi! So, my wifi drops every evening. It is a TP-Link.", "My wifi drops every evening."),  # first sentence
    ("Yes. And the cat too?", "Yes. And the cat too?"),  # a first sentence too short to say anything
    ("I want to bake my first sourdough bread this weekend and I have a question about the starter",
     "I want to bake my first sourdough bread this weekend and I have a question…"),  # cut between words
])
def test_title_is_the_first_sentence_of_the_first_message_within_80_characters(content, title):
    chat = Chat()
    chat.user(axis(0), content=content)
    chat.user(axis(0), content="a later message does not rename the topic")
    assert chat.state.topics[0].title == title


# --- assistant replies and redelivery --------------------------------------------------------

def test_a_reply_joins_the_active_topic():
    chat = Chat()
    chat.user(axis(0))
    chat.user(axis(1))
    assert chat.assistant(now=9.0) == [MessageAssigned("conv:topic-2", 2, None)]
    assert [m.role for m in chat.state.topics[1].messages] == ["user", "assistant"]
    assert chat.state.topics[1].last_active_at == 9.0 and chat.state.topics[1].access_count == 0


def test_a_reply_before_any_topic_is_reported_not_dropped():
    chat = Chat()
    assert chat.assistant() == [MessageUnassigned(0, "no active topic")]
    assert chat.state.unassigned_count == 1 and chat.state.topics == ()


def test_redelivered_messages_change_nothing():
    chat = Chat()
    chat.user(axis(0))
    chat.assistant()
    before = chat.state
    for again in (UserMessage(0, "dup", axis(5), 1.0), AssistantMessage(1, "dup", 1.0),
                  UserMessage(1, "dup", axis(0), 1.0)):
        assert step(before, again, 1.0, CFG) == (before, ())


# --- compaction ------------------------------------------------------------------------------

def test_the_thirteenth_message_requests_a_compaction_of_all_but_the_newest_four():
    chat = Chat()
    assert of_type(chat.turns(axis(0), 12), CompactionRequested) == []
    (request,) = of_type(chat.turns(axis(0), 1), CompactionRequested)
    topic = chat.state.topics[0]
    assert request.topic_id == topic.topic_id and request.upto_seq == 8 and request.attempt == 1
    assert [m.seq for m in request.messages_to_archive] == list(range(9))
    assert request.messages_to_archive == topic.messages[:9] and request.previous_summary is None
    assert len(topic.messages) == 13  # nothing leaves before the summary comes back


def test_only_one_compaction_is_in_flight_per_topic():
    chat = Chat()
    requests = of_type(chat.turns(axis(0), 25), CompactionRequested)
    assert len(requests) == 1 and len(chat.state.topics[0].messages) == 25


def test_done_drops_the_archived_messages_and_keeps_the_summary():
    chat = Chat()
    (request,) = of_type(chat.turns(axis(0), 13, now=5.0), CompactionRequested)
    assert chat.send(CompactionDone(request.topic_id, 8, "They reset the router."), 6.0) == []
    topic = chat.state.topics[0]
    assert [m.seq for m in topic.messages] == [9, 10, 11, 12]
    assert (topic.summary, topic.summary_upto_seq, topic.archived_count) == ("They reset the router.", 8, 9)
    assert topic.archived_range == (0, 8) and topic.compaction is None and topic.message_count == 13
    stats = topic_stats(chat.state, None, 6.0)
    assert (stats["active_messages"], stats["compressed_messages"], stats["total_messages"]) == (4, 9, 13)
    assert stats["has_summary"] is True


def test_the_next_compaction_extends_the_previous_summary():
    chat = Chat()
    (first,) = of_type(chat.turns(axis(0), 13), CompactionRequested)
    chat.send(CompactionDone(first.topic_id, first.upto_seq, "S1"), 1.0)
    (second,) = of_type(chat.turns(axis(0), 9), CompactionRequested)  # 4 + 9 = 13 again
    assert second.previous_summary == "S1" and second.upto_seq == 17
    assert [m.seq for m in second.messages_to_archive] == list(range(9, 18))
    chat.send(CompactionDone(second.topic_id, 17, "S2"), 2.0)
    assert chat.state.topics[0].archived_range == (0, 17) and chat.state.topics[0].archived_count == 18


def test_a_topic_still_overfull_after_done_asks_again_at_once():
    chat = Chat()
    (first,) = of_type(chat.turns(axis(0), 30), CompactionRequested)  # 17 more arrive while in flight
    # The 22nd message put 13 above the first cutoff: the second compaction (9..17) was decided
    # then, exactly as if the first summary had come back at once, and is asked for now.
    assert chat.state.topics[0].due == ((17, 21, 22),)
    (again,) = chat.send(CompactionDone(first.topic_id, 8, "S1"), 1.0)
    assert isinstance(again, CompactionRequested) and again.previous_summary == "S1"
    assert [m.seq for m in again.messages_to_archive] == list(range(9, 18)) and again.asked_seq == 21
    assert chat.send(CompactionDone(first.topic_id, 17, "S2"), 2.0) == []  # 18..29: 12 active, not over


def test_a_topic_back_at_the_limit_after_done_waits_for_the_thirteenth():
    chat = Chat()
    (first,) = of_type(chat.turns(axis(0), 20), CompactionRequested)
    assert chat.send(CompactionDone(first.topic_id, 8, "S1"), 1.0) == []  # 11 active
    assert of_type(chat.turns(axis(0), 1), CompactionRequested) == []  # 12 active
    (again,) = of_type(chat.turns(axis(0), 1), CompactionRequested)  # 13 active
    assert again.previous_summary == "S1" and again.upto_seq == 17


@pytest.mark.parametrize("stale", [CompactionDone("conv:topic-1", 7, "wrong range"),
                                   CompactionDone("conv:topic-9", 8, "unknown topic"),
                                   CompactionFailed("conv:topic-1", 3, "old request")])
def test_results_that_do_not_answer_the_request_in_flight_are_ignored(stale):
    chat = Chat()
    chat.turns(axis(0), 13)
    assert step(chat.state, stale, 1.0, CFG) == (chat.state, ())


def test_a_duplicate_done_changes_nothing():
    chat = Chat()
    chat.turns(axis(0), 13)
    chat.send(CompactionDone("conv:topic-1", 8, "S"), 1.0)
    assert step(chat.state, CompactionDone("conv:topic-1", 8, "S"), 2.0, CFG) == (chat.state, ())


def test_a_failed_compaction_is_retried_after_the_delay():
    chat = Chat()
    chat.turns(axis(0), 13)
    assert chat.send(CompactionFailed("conv:topic-1", 8, "llm down"), 10.0) == []
    topic = chat.state.topics[0]
    assert topic.compaction is None and topic.compaction_failures == 1 and len(topic.messages) == 13
    assert of_type(chat.user(axis(0), now=11.0), CompactionRequested) == []  # still backing off
    (retry,) = of_type(chat.send(Tick(), 10.0 + CFG.compaction_retry_seconds), CompactionRequested)
    assert retry.attempt == 1 and retry.upto_seq == 8  # the same compaction: cutoffs never move


def test_a_stuck_compaction_is_asked_for_again_with_the_same_messages():
    chat = Chat()
    (request,) = of_type(chat.turns(axis(0), 13, now=100.0), CompactionRequested)
    assert chat.send(Tick(), 100.0 + CFG.compaction_timeout_seconds) == []  # at the limit: waiting
    (again,) = chat.send(Tick(), 101.0 + CFG.compaction_timeout_seconds)
    assert again == CompactionRequested(request.topic_id, request.messages_to_archive, None, 8, attempt=2,
                                        asked_seq=12)
    chat.send(CompactionDone(request.topic_id, 8, "S"), 500.0)  # either attempt's answer counts
    assert chat.state.topics[0].archived_count == 9


# --- restore ---------------------------------------------------------------------------------

def test_an_archived_topic_becoming_active_again_requests_a_restore():
    chat = Chat()
    chat.turns(axis(0), 13)
    chat.send(CompactionDone("conv:topic-1", 8, "S"), 1.0)
    assert of_type(chat.user(axis(0)), ArchiveRestoreRequested) == []  # already active
    chat.user(axis(1))
    commands = chat.user(axis(0))
    assert commands[:2] == [TopicActivated("conv:topic-1", "conv:topic-2"), ArchiveRestoreRequested("conv:topic-1")]
    assert of_type(chat.user(axis(0)), ArchiveRestoreRequested) == []


def test_a_topic_without_archive_is_activated_without_restore():
    chat = Chat()
    chat.turns(axis(0), 12)  # at the limit: no compaction decided
    chat.user(axis(1))
    assert chat.user(axis(0))[:1] == [TopicActivated("conv:topic-1", "conv:topic-2")]
    assert of_type(chat.emitted, ArchiveRestoreRequested) == []


def test_a_topic_whose_compaction_is_in_flight_is_restored_as_if_it_had_come_back():
    """Whether a summary has come back yet must not change what the read model does."""
    chat = Chat()
    chat.turns(axis(0), 13)  # compaction requested, not done
    chat.user(axis(1))
    assert chat.user(axis(0))[:2] == [TopicActivated("conv:topic-1", "conv:topic-2"),
                                      ArchiveRestoreRequested("conv:topic-1")]


# --- eviction --------------------------------------------------------------------------------

def fill(chat, count, now=0.0, importance=1.0, first_axis=0):
    for i in range(count):
        chat.user(axis(first_axis + i), now=now, importance=importance)


def test_no_eviction_at_or_below_max_topics_however_old():
    chat = Chat()
    fill(chat, 19, now=0.0)
    fill(chat, 1, now=100 * DAY, first_axis=19)
    assert len(chat.state.topics) == 20 and of_type(chat.emitted, TopicEvicted) == []


def test_over_max_topics_every_topic_below_five_percent_goes_lowest_first():
    chat = Chat(config=TopicConfig(capacity_eviction=False))
    ages = {0: 5.0, 1: 6.0, 2: 4.0, 3: 4.5, 4: 1.0}  # topic index -> idle days at the 21st topic
    now = 10 * DAY
    for i in range(20):
        chat.user(axis(i), now=now - ages.get(i, 0.0) * DAY, importance=1.0)
    commands = chat.user(axis(20), now=now, importance=1.0)
    evicted = of_type(commands, TopicEvicted)
    # 5 and 6 idle days: 3.1% and 1.6%; 4.5 days: 4.4%; 4 days: 6.25% stays.
    assert [e.topic_id for e in evicted] == ["conv:topic-2", "conv:topic-1", "conv:topic-4"]
    assert [e.priority for e in evicted] == pytest.approx([0.5 ** 6, 0.5 ** 5, 0.5 ** 4.5])
    assert {e.reason for e in evicted} == {"decayed"}
    assert len(chat.state.topics) == 18 and chat.state.evicted_count == 3
    assert chat.state.topic("conv:topic-3") is not None


def test_the_seed_rule_alone_keeps_fresh_topics_beyond_max_topics():
    chat = Chat(config=TopicConfig(capacity_eviction=False))
    fill(chat, 25)
    assert len(chat.state.topics) == 25 and of_type(chat.emitted, TopicEvicted) == []


def test_capacity_eviction_keeps_the_working_set_at_max_topics():
    chat = Chat()
    for i in range(25):
        chat.user(axis(i), now=float(i), importance=1.0)
    evicted = of_type(chat.emitted, TopicEvicted)
    assert [e.topic_id for e in evicted] == [f"conv:topic-{n}" for n in range(1, 6)]  # least recent first
    assert {e.reason for e in evicted} == {"capacity"} and len(chat.state.topics) == 20


def test_the_active_topic_is_never_evicted_even_with_the_lowest_priority():
    chat = Chat(config=TopicConfig(capacity_eviction=False))
    fill(chat, 20, importance=1.0)
    commands = chat.user(axis(20), importance=0.0)  # priority 0 but active
    assert of_type(commands, TopicEvicted) == [] and len(chat.state.topics) == 21
    # Weeks later a timer fires: everything has decayed, the active topic stays.
    commands = chat.send(Tick(), 30 * DAY)
    assert len(of_type(commands, TopicEvicted)) == 20
    assert [t.topic_id for t in chat.state.topics] == ["conv:topic-21"]


def test_capacity_eviction_skips_the_active_topic_too():
    chat = Chat()
    fill(chat, 20, importance=1.0)
    (evicted,) = of_type(chat.user(axis(20), importance=0.0), TopicEvicted)
    assert evicted.topic_id == "conv:topic-1" and chat.state.active_topic_id == "conv:topic-21"


def test_access_count_stretches_the_half_life_during_eviction():
    chat = Chat(config=TopicConfig(capacity_eviction=False))
    chat.user(axis(0), importance=1.0)
    for _ in range(5):
        chat.user(axis(0))  # 5 accesses: 2-day half-life
    fill(chat, 19, first_axis=1)
    commands = chat.user(axis(20), now=5 * DAY)
    assert [e.topic_id for e in of_type(commands, TopicEvicted)] == [f"conv:topic-{n}" for n in range(2, 21)]
    assert topic_priority(chat.state.topics[0], 5 * DAY) == pytest.approx(0.5 ** 2.5)


def test_an_evicted_topic_is_forgotten_and_a_new_one_takes_its_place():
    chat = Chat(config=TopicConfig(capacity_eviction=False))
    fill(chat, 20)
    chat.user(axis(20), now=10 * DAY)
    chat.user(axis(0), now=10 * DAY)
    assert chat.state.topics[-1].topic_id == "conv:topic-22" and chat.state.next_topic_number == 23


# --- state -----------------------------------------------------------------------------------

def scripted_conversation():
    rng = random.Random(4)
    inputs, seq, now = [], 0, 0.0
    for _ in range(300):
        now += rng.choice([5.0, 60.0, 3600.0, DAY])
        inputs.append((UserMessage(seq, f"question {seq}", axis(rng.randrange(30)), now), now))
        inputs.append((AssistantMessage(seq + 1, f"answer {seq + 1}", now + 1), now + 1))
        seq += 2
    return inputs


def test_ids_and_commands_are_deterministic_on_replay():
    first = run(scripted_conversation())
    second = run(scripted_conversation())
    assert first == second
    assert [c.topic_id for c in of_type(first[1], TopicCreated)][:3] == ["conv:topic-1", "conv:topic-2", "conv:topic-3"]


def test_state_stays_bounded_when_summaries_come_back():
    state, pending = TopicsState("conv"), []
    for observed, now in scripted_conversation():
        state, commands = step(state, observed, now, CFG)
        for request in of_type(commands, CompactionRequested):
            state, _ = step(state, CompactionDone(request.topic_id, request.upto_seq, "s"), now, CFG)
        assert len(state.topics) <= CFG.max_topics
        assert all(len(t.messages) <= CFG.max_messages_per_topic for t in state.topics)
        assert all(t.message_count == t.archived_count + len(t.messages) for t in state.topics)


def test_to_dict_from_dict_round_trips_through_json():
    chat = Chat()
    chat.turns(axis(0), 13)
    chat.send(CompactionDone("conv:topic-1", 8, "S"), 1.0)
    chat.turns(axis(1), 25)  # a second topic with a compaction in flight and one decided
    chat.assistant()
    assert chat.state.topics[1].compaction is not None and chat.state.topics[1].due
    data = json.loads(json.dumps(chat.state.to_dict()))
    assert TopicsState.from_dict(data) == chat.state


def test_from_dict_ignores_unknown_keys_and_defaults_missing_ones():
    state = TopicsState.from_dict({"conversation_id": "c", "future": 1,
                                   "topics": [{"topic_id": "c:topic-1", "title": "t", "centroid": [1.0],
                                               "created_at": 0, "last_active_at": 0, "extra": True}]})
    assert state.topics[0].messages == () and state.topics[0].importance == 0.5 and state.last_seq == -1


def test_stats_reproduce_the_seed_example():
    topic = Topic("abc123", "Discussion about features", (1.0,), created_at=0.0, last_active_at=3480.0,
                  importance=0.5, access_count=15, message_count=12,
                  messages=tuple(TopicMessage(s, "user", "m", 0.0) for s in range(8, 12)),
                  summary="s", summary_upto_seq=7, archived_count=8, archived_first_seq=0)
    stats = topic_stats(TopicsState("c", (topic,), "abc123"), "abc123", 3600.0)
    assert {k: v for k, v in stats.items() if k != "priority"} == {
        "topic_id": "abc123", "topic_title": "Discussion about features", "active_messages": 4,
        "compressed_messages": 8, "total_messages": 12, "has_summary": True, "importance_score": 0.5,
        "access_count": 15, "memory_type": "long-term", "half_life_days": 8.0, "age_seconds": 3600,
        "inactive_seconds": 120}
    assert topic_stats(TopicsState("c"), "nope", 0.0) is None


# --- compaction cutoffs do not depend on when summaries come back ---------------------------

def _summary_of(request: CompactionRequested) -> str:
    return f"S({request.topic_id}:{request.upto_seq}<-{request.previous_summary})"


def _history(seed: int, *, late: bool, subjects: int):
    """A random history of user/assistant turns over `subjects` subjects, as (seq, role,
    subject, time) in log order; `late`: some seqs arrive 3-12 messages after their place."""
    rng = random.Random(seed)
    entries, seq = [], 0
    for turn in range(rng.randint(60, 160)):
        subject = rng.choice([0, 0, 0] + list(range(1, subjects)))
        entries.append((seq, "user", subject, turn * 3600.0))
        seq += 1
        if rng.random() < 0.7:
            entries.append((seq, "assistant", subject, turn * 3600.0 + 60))
            seq += 1
    if late:
        for _ in range(len(entries) // 15):
            i = rng.randrange(len(entries) - 13)
            entries.insert(i + rng.randint(3, 12), entries.pop(i))
    return entries


def _fold_history(seed: int, delay: int, *, late: bool = False, subjects: int = 3, config=CFG):
    """Fold the history with each compaction answered `delay` messages after it was asked for
    (0: at once), every answer before the end. Returns the requests (wall fields left out), the
    final working set and draining topics without wall-clock fields, and the restores."""
    state, emitted, requests, pending = TopicsState("conv"), [], [], []

    def send(observed, now):  # a replay: event time moves, the wall clock hardly does
        nonlocal state
        state, commands = step(state, observed, now, config, wall=0.0)
        emitted.extend(commands)
        return commands

    def take(commands, position):
        for c in commands:
            if isinstance(c, CompactionRequested):
                requests.append((c.topic_id, c.upto_seq, tuple(m.seq for m in c.messages_to_archive),
                                 c.previous_summary, c.asked_seq))
                pending.append((position + delay, c))

    def answer(position, now):
        while pending and pending[0][0] <= position:
            _, request = pending.pop(0)
            take(send(CompactionDone(request.topic_id, request.upto_seq, _summary_of(request)), now), position)

    now = 0.0
    for position, (seq, role, subject, at) in enumerate(_history(seed, late=late, subjects=subjects)):
        now = max(now, at)
        answer(position, now)
        message = (UserMessage(seq, f"m{seq}", axis(subject), at) if role == "user"
                   else AssistantMessage(seq, f"r{seq}", at))
        take(send(message, now), position)
    while pending:
        answer(pending[0][0], now)

    def shape(t):
        return (t.topic_id, t.summary, t.summary_upto_seq, t.archived_count, t.archived_first_seq,
                tuple(m.seq for m in t.messages), t.due, t.message_count, t.compaction is None)

    restores = [c for c in emitted if isinstance(c, (ArchiveRestoreRequested, TopicActivated, TopicEvicted))]
    # per topic in order; across topics they interleave differently
    return sorted(requests), tuple(map(shape, state.topics)), tuple(map(shape, state.draining)), restores


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("case", ["in order", "late messages", "evictions"])
def test_the_compactions_are_the_same_whenever_the_summaries_come_back(seed, case):
    """Stream and batch replays must ask for the same compactions (docs/replay.md): with
    answers at once, after 3 messages, or after 25 (several decided while one is in flight);
    with seqs arriving late (placed after a compaction of their range was decided), and with
    topics evicted while compactions of theirs are decided and not answered."""
    options = {"in order": {}, "late messages": {"late": True},
               "evictions": {"subjects": 5, "config": TopicConfig(max_topics=3)}}[case]
    at_once = _fold_history(seed, 0, **options)
    assert at_once[0], "the history must cause compactions"
    for delay in (3, 25):
        assert _fold_history(seed, delay, **options) == at_once
    if case == "evictions":
        assert any(isinstance(c, TopicEvicted) for c in at_once[3]), "the history must evict topics"


def test_a_late_attempt_s_summary_after_an_earlier_attempt_s_failure_still_counts():
    """Attempt 1 times out, attempt 2 is asked; attempt 1's failure comes back first (the same
    cutoff is due again), then attempt 2's summary: it is the compaction, not a stale answer
    (otherwise the read model has it, the stage skips every re-ask, and the topic never
    compacts again)."""
    chat = Chat()
    (request,) = of_type(chat.turns(axis(0), 13, now=100.0), CompactionRequested)
    (again,) = chat.send(Tick(), 101.0 + CFG.compaction_timeout_seconds)
    assert again.attempt == 2
    assert chat.send(CompactionFailed(request.topic_id, 8, "attempt 1: llm down"), 102.0 + CFG.compaction_timeout_seconds) == []
    topic = chat.state.topics[0]
    assert topic.compaction is None and topic.due == ((8, 12, 13),)
    chat.send(CompactionDone(request.topic_id, 8, "S from attempt 2"), 103.0 + CFG.compaction_timeout_seconds)
    topic = chat.state.topics[0]
    assert topic.summary == "S from attempt 2" and topic.archived_count == 9 and topic.due == ()
    assert topic.compaction is None and [m.seq for m in topic.messages] == [9, 10, 11, 12]


def test_an_evicted_topic_still_gets_its_decided_compactions():
    """Answered at once, both compactions of topic 1 are done before it is evicted; answered
    late, the second is still due when it leaves: it must still be asked for."""
    config = TopicConfig(max_topics=2)
    chat = Chat(config=config)
    (first,) = of_type(chat.turns(axis(0), 22, now=0.0), CompactionRequested)
    assert chat.state.topics[0].due == ((17, 21, 22),)  # decided, waiting for the first answer
    for i in (1, 2):  # two fresh subjects a month later: topic 1 has decayed and leaves
        chat.user(axis(i), now=30 * DAY)
    assert [t.topic_id for t in chat.state.topics] == ["conv:topic-2", "conv:topic-3"]
    assert of_type(chat.emitted, TopicEvicted)[0].topic_id == "conv:topic-1"
    (second,) = chat.send(CompactionDone(first.topic_id, 8, "S1"), 30 * DAY)
    assert isinstance(second, CompactionRequested) and second.upto_seq == 17 and second.previous_summary == "S1"
    assert [t.topic_id for t in chat.state.draining] == ["conv:topic-1"]
    assert chat.send(CompactionDone(first.topic_id, 17, "S2"), 30 * DAY) == []
    assert chat.state.draining == ()  # drained: it leaves for good


def _register(subject: int, i: int) -> list[float]:
    """A message of `subject` in a conversation whose messages all share one large component
    (axis 0: the speakers' names, the register): cosine 0.64 across subjects, ~0.93 within."""
    part = [0.0] * DIM
    part[subject], part[4 + i] = 0.9, math.sqrt(1 - 0.81)
    return [0.8 * (k == 0) + 0.6 * v for k, v in enumerate(part)]


def test_centred_matching_tells_subjects_apart_where_a_shared_component_merges_them():
    """Issue 24: on real conversations every message is ~0.4-0.6 similar to every other, so one
    topic took everything. Taken off the conversation's mean vector, the subjects separate and a
    return to the first one rejoins its topic."""
    subjects = [1] * 6 + [2] * 6 + [1] * 2
    plain = TopicConfig(similarity_threshold=0.3, active_topic_bonus=0.15)
    centred = TopicConfig(similarity_threshold=0.3, active_topic_bonus=0.15, center_on_conversation=True,
                          background_warmup=2)
    placed = {}
    for name, config in (("plain", plain), ("centred", centred)):
        chat, topics = Chat(config=config), []
        for i, subject in enumerate(subjects):
            chat.user(_register(subject, i), now=1000.0 + i)
            topics.append(chat.state.active_topic_id)
        placed[name] = (topics, chat.state)
    assert len(set(placed["plain"][0])) == 1
    topics, state = placed["centred"]
    assert len(set(topics[:6])) == 1 and len(set(topics[6:12])) == 1 and topics[0] != topics[6]
    assert topics[12:] == [topics[0]] * 2
    assert state.background_count == len(subjects)
    assert TopicsState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


@pytest.mark.parametrize(("pause", "gap", "joins"), [(60.0, 3600.0, True), (7200.0, 3600.0, False),
                                                     (7200.0, 0.0, True)])
def test_after_a_session_gap_the_active_topic_gets_no_follow_up_bonus(pause, gap, joins):
    """A message at cosine 0.2 joins the active topic on its bonus (0.3 - 0.15) within a session;
    after a pause of a session gap the seed's threshold alone decides (0: the bonus never lapses)."""
    config = TopicConfig(similarity_threshold=0.3, active_topic_bonus=0.15, session_gap_seconds=gap)
    state, _ = run([(UserMessage(0, "a", axis(0), 1000.0), 1000.0),
                    (UserMessage(1, "b", at_cosine(0.2), 1000.0 + pause), 1000.0 + pause)], config=config)
    assert (len(state.topics) == 1) is joins

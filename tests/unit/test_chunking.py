"""Rules of the rolling chunk trigger (seed 003): 30/20 boundary, redelivery, failure, timeout."""

from __future__ import annotations

import json

import pytest

from domain.facts.chunking import (
    ChunkConfig,
    ChunkDone,
    ChunkFailed,
    ChunkState,
    MessageSaved,
    RequestChunk,
    SkipChunk,
    Tick,
    next_range,
    step,
)

CFG = ChunkConfig()


def run(inputs, state=None, config=CFG):
    """Feed (observed, now) pairs; return the final state and every command emitted."""
    state = state or ChunkState()
    emitted = []
    for observed, now in inputs:
        state, commands = step(state, observed, now, config)
        emitted.extend(commands)
    return state, emitted


def messages(count: int, first: int = 0, now: float = 0.0):
    return [(MessageSaved(seq), now) for seq in range(first, first + count)]


# --- seed 003's numbers: SUMMARIZATION_THRESHOLD = 30, BATCH_SIZE = 20 ------------------------

@pytest.mark.parametrize(
    ("total", "last_end", "expected"),
    [(30, 0, None), (31, 0, (0, 20)), (50, 20, None), (51, 20, (20, 40)),
     (71, 40, (40, 60)), (0, 0, None), (200, 0, (0, 20))],
)
def test_next_range_is_seed_003_arithmetic(total, last_end, expected):
    state = ChunkState(last_seq=total - 1, last_summarized_end=last_end)
    assert next_range(state, CFG) == expected


def test_thirty_unsummarized_messages_do_not_trigger_and_the_31st_requests_0_to_20():
    state, emitted = run(messages(30))
    assert emitted == [] and state.unsummarized == 30
    state, commands = step(state, MessageSaved(30), 1.0, CFG)
    assert commands == (RequestChunk(0, 20, 1),)  # end is exclusive: seqs 0..19
    assert state.in_flight.requested_at == 1.0


def test_after_first_chunk_the_next_trigger_is_at_51_messages_for_20_to_40():
    state, emitted = run(messages(31))
    state, commands = step(state, ChunkDone(0, 20), 2.0, CFG)
    assert commands == () and state.last_summarized_end == 20 and state.in_flight is None
    state, emitted = run(messages(19, first=31, now=3.0), state)  # 50 messages: 30 unsummarized
    assert emitted == []
    state, commands = step(state, MessageSaved(50), 4.0, CFG)
    assert commands == (RequestChunk(20, 40, 1),)


def test_only_one_request_in_flight_and_completion_catches_up_a_backlog():
    state, emitted = run(messages(80))
    assert emitted == [RequestChunk(0, 20, 1)]
    state, commands = step(state, ChunkDone(0, 20), 1.0, CFG)
    assert commands == (RequestChunk(20, 40, 1),)  # 60 unsummarized > 30: no need to wait
    state, commands = step(state, ChunkDone(20, 40), 2.0, CFG)
    assert commands == (RequestChunk(40, 60, 1),)
    state, commands = step(state, ChunkDone(40, 60), 3.0, CFG)
    assert commands == () and state.unsummarized == 20


# --- redelivery and stale results ------------------------------------------------------------

def test_redelivered_messages_change_nothing():
    state, _ = run(messages(31))
    state, _ = step(state, ChunkDone(0, 20), 1.0, CFG)
    for seq in (30, 0, 17, 25):
        after, commands = step(state, MessageSaved(seq), 2.0, CFG)
        assert commands == () and after == state


@pytest.mark.parametrize("stale", [ChunkDone(0, 20), ChunkDone(40, 60), ChunkDone(20, 20),
                                   ChunkFailed(0, 20, "late"), ChunkFailed(20, 40, "old", attempt=1)])
def test_duplicate_or_stale_results_change_nothing(stale):
    state, _ = run(messages(51))
    state, _ = step(state, ChunkDone(0, 20), 1.0, CFG)  # (20, 40) attempt 1 in flight
    state, _ = step(state, Tick(), 1.0 + CFG.request_timeout_s + 1, CFG)  # attempt 2
    assert state.in_flight.attempt == 2
    after, commands = step(state, stale, 200.0, CFG)
    assert commands == () and after == state


def test_late_result_of_a_replaced_attempt_is_accepted():
    state, _ = run(messages(31))
    state, commands = step(state, Tick(), CFG.request_timeout_s + 1, CFG)
    assert commands == (RequestChunk(0, 20, 2),) and state.reissues == 1
    state, _ = step(state, ChunkDone(0, 20), 130.0, CFG)
    assert state.last_summarized_end == 20 and state.in_flight is None and state.completions == 1


# --- failures: nothing stored, retried later with backoff, never stuck ------------------------

def test_failure_leaves_the_range_unsummarized_and_retries_after_backoff():
    state, _ = run(messages(31))
    state, commands = step(state, ChunkFailed(0, 20, "malformed JSON"), 10.0, CFG)
    assert commands == () and state.last_summarized_end == 0 and state.in_flight is None
    assert state.not_before == 10.0 + CFG.failure_backoff_s and state.last_error == "malformed JSON"
    state, commands = step(state, Tick(), 10.0 + CFG.failure_backoff_s - 1, CFG)
    assert commands == ()  # still backing off
    state, commands = step(state, MessageSaved(31), 10.0 + CFG.failure_backoff_s - 1, CFG)
    assert commands == ()
    state, commands = step(state, Tick(), 10.0 + CFG.failure_backoff_s, CFG)
    assert commands == (RequestChunk(0, 20, 2),)


@pytest.mark.parametrize(("failures", "expected"), [(1, 30.0), (2, 60.0), (3, 120.0), (20, 3600.0)])
def test_backoff_doubles_and_is_capped(failures, expected):
    assert CFG.backoff(failures) == expected


def test_a_range_that_keeps_failing_is_skipped_after_max_attempts_and_work_moves_on():
    config = ChunkConfig(max_attempts=3)
    state, _ = run(messages(60), config=config)
    now = 0.0
    for attempt in (1, 2):
        state, _ = step(state, ChunkFailed(0, 20, "bad", attempt=attempt), now, config)
        now = state.not_before
        state, commands = step(state, Tick(), now, config)
        assert commands == (RequestChunk(0, 20, attempt + 1),)
    state, commands = step(state, ChunkFailed(0, 20, "bad"), now, config)
    assert commands == (SkipChunk(0, 20, 3, "bad"), RequestChunk(20, 40, 1))
    assert state.last_summarized_end == 20 and state.skipped == 1 and state.failures == 3


def test_a_request_that_never_returns_is_reissued_then_skipped():
    config = ChunkConfig(max_attempts=2, request_timeout_s=100.0)
    state, _ = run(messages(31), config=config)
    state, commands = step(state, Tick(), 100.0, config)
    assert commands == ()  # not yet past the timeout
    state, commands = step(state, Tick(), 100.5, config)
    assert commands == (RequestChunk(0, 20, 2),)
    state, commands = step(state, Tick(), 201.0, config)
    assert [type(c) for c in commands] == [SkipChunk]  # 31 - 20 = 11 left: no new request
    assert state.last_summarized_end == 20 and state.in_flight is None


# --- configuration and persistence --------------------------------------------------------------

def test_thresholds_are_configurable():
    config = ChunkConfig(summarization_threshold=4, batch_size=3)
    _, emitted = run(messages(5), config=config)
    assert emitted == [RequestChunk(0, 3, 1)]


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"batch_size": 32}, {"max_attempts": 0}])
def test_invalid_configs_are_refused(kwargs):
    with pytest.raises(ValueError):
        ChunkConfig(**kwargs)


def test_state_round_trips_through_json_and_tolerates_missing_keys():
    state, _ = run(messages(31))
    state, _ = step(state, ChunkFailed(0, 20, "x"), 5.0, CFG)
    state, _ = step(state, Tick(), 100.0, CFG)
    restored = ChunkState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored == state and restored.in_flight is not None
    assert ChunkState.from_dict({"last_seq": 4, "unknown": 1}) == ChunkState(last_seq=4)


# --- ranges asked for ahead (facts.max_ahead): a burst does not wait a round trip per range ------

AHEAD = ChunkConfig(max_ahead=2)


def test_a_backlog_asks_for_up_to_max_ahead_ranges_beyond_the_one_in_flight_as_they_come_due():
    state, emitted = run(messages(80), config=AHEAD)
    # 31 messages: 0-20; 51: 20-40 ahead; 71: 40-60 ahead; 60-80 is not due (20 left <= 30)
    assert emitted == [RequestChunk(0, 20, 1), RequestChunk(20, 40, 1), RequestChunk(40, 60, 1)]
    assert state.in_flight.start_seq == 0 and state.requested_end == 60 and state.requests == 3
    state, emitted = run(messages(40, first=80), state, config=AHEAD)
    assert emitted == []  # two ahead already: the next waits for the one in flight
    state, commands = step(state, ChunkDone(0, 20), 1.0, AHEAD)
    assert commands == (RequestChunk(60, 80, 1),)  # 20-40 is in flight now, without a new request
    assert state.in_flight == type(state.in_flight)(20, 40, 1, 1.0) and state.last_summarized_end == 20


def test_the_ranges_are_the_ones_of_one_at_a_time_and_results_ahead_of_their_turn_are_kept():
    state, emitted = run(messages(120), config=AHEAD)
    for start in (40, 20):  # out of order: kept until the range before them is done
        state, commands = step(state, ChunkDone(start, start + 20), 1.0, AHEAD)
        assert commands == () and state.last_summarized_end == 0
    state, commands = step(state, ChunkDone(0, 20), 2.0, AHEAD)
    assert state.last_summarized_end == 60 and state.completions == 3 and state.done_ahead == ()
    assert commands == (RequestChunk(60, 80, 1), RequestChunk(80, 100, 1))  # 60-80 in flight, 80-100 ahead
    emitted += list(commands)
    for start in (60, 80):
        state, commands = step(state, ChunkDone(start, start + 20), 3.0, AHEAD)
        emitted += list(commands)
    one_at_a_time, _ = run(messages(120))
    for start in range(0, 100, 20):
        one_at_a_time, more = step(one_at_a_time, ChunkDone(start, start + 20), 3.0, CFG)
    assert state.last_summarized_end == one_at_a_time.last_summarized_end == 100 and state.in_flight is None
    assert sorted(c.start_seq for c in emitted) == list(range(0, 100, 20))  # each range asked for once


def test_a_range_whose_first_attempt_failed_ahead_is_retried_after_backoff_in_its_turn():
    state, _ = run(messages(71), config=AHEAD)
    state, commands = step(state, ChunkFailed(20, 40, "bad", attempt=1), 1.0, AHEAD)
    assert commands == () and state.failed_ahead == (20,)
    state, commands = step(state, ChunkDone(40, 60), 1.5, AHEAD)
    state, commands = step(state, ChunkDone(0, 20), 2.0, AHEAD)
    assert commands == () and state.last_summarized_end == 20 and state.in_flight is None
    assert state.failed_attempts == 1 and state.not_before == 2.0 + AHEAD.failure_backoff_s
    state, commands = step(state, Tick(), state.not_before, AHEAD)
    assert commands == (RequestChunk(20, 40, 2),)  # 40-60 is done already: not asked again
    state, commands = step(state, ChunkDone(20, 40), 40.0, AHEAD)
    assert state.last_summarized_end == 60 and commands == ()


def test_a_lost_answer_ahead_is_reissued_once_its_range_has_waited_its_timeout_in_flight():
    state, _ = run(messages(51), config=AHEAD)
    state, _ = step(state, ChunkDone(0, 20), 10.0, AHEAD)  # 20-40 in flight from now, its answer lost
    state, commands = step(state, Tick(), 10.0 + AHEAD.request_timeout_s, AHEAD)
    assert commands == ()
    state, commands = step(state, Tick(), 10.5 + AHEAD.request_timeout_s, AHEAD)
    assert commands == (RequestChunk(20, 40, 2),)


def test_ranges_ahead_round_trip_through_json():
    state, _ = run(messages(120), config=AHEAD)
    state, _ = step(state, ChunkDone(40, 60), 1.0, AHEAD)
    state, _ = step(state, ChunkFailed(20, 40, "x", attempt=1), 1.0, AHEAD)
    restored = ChunkState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored == state and restored.done_ahead == (40,) and restored.failed_ahead == (20,)

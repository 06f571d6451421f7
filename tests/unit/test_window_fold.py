"""Rules of the sliding-window fold: range, trigger, redelivery, timeouts, failures, state."""

from __future__ import annotations

import json
import random

import pytest

from core.settings import WindowSettings
from schemas import events, registry
from domain.window.fold import (
    GiveUp,
    MessageSaved,
    RequestSummary,
    ReplayRequest,
    SummaryDone,
    SummaryGaveUp,
    Tick,
    WindowConfig,
    WindowState,
    calculate_summary_range,
    decide,
    evolve,
    observe,
    step,
)

CFG = WindowConfig()


def run(inputs, state=None, config=CFG):
    """Feed (observed, now) pairs; return the final state and every command emitted."""
    state = state or WindowState()
    emitted = []
    for observed, now in inputs:
        state, commands = step(state, observed, now, config)
        emitted.extend(commands)
    return state, emitted


def rounds(first: int, last: int, now: float = 0.0):
    """Messages of rounds first..last (user seq 2r-2, assistant seq 2r-1), all at `now`."""
    for r in range(first, last + 1):
        yield MessageSaved(2 * r - 2, "user"), now
        yield MessageSaved(2 * r - 1, "assistant"), now


def done(command: RequestSummary) -> SummaryDone:
    return SummaryDone(command.memory_id, command.attempt, command.start_seq, command.end_seq)


# --- seed 000's sliding-window calculation ----------------------------------------------

@pytest.mark.parametrize(
    ("last_saved_seq", "expected"),
    [(5, (0, 5)), (13, (0, 13)), (15, (2, 15)), (19, (6, 19)),  # seed 000 / 002 table
     (0, (0, 0)), (14, (2, 14)), (16, (4, 16)), (17, (4, 17))],  # odd start bumped to even
)
def test_summary_range_matches_seed_table(last_saved_seq, expected):
    assert calculate_summary_range(last_saved_seq, 14) == expected


@pytest.mark.parametrize("window_size", [2, 3, 7, 14, 15])
def test_summary_range_start_is_the_smallest_even_seq_inside_the_window(window_size):
    for end in range(0, 60):
        start, got_end = calculate_summary_range(end, window_size)
        lowest = max(0, end - window_size + 1)
        assert got_end == end and start % 2 == 0
        assert lowest <= start <= end  # never more than window_size messages
        assert start - 2 < lowest  # and no even start further back would still fit


# --- trigger -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("observed", "triggers"),
    [(MessageSaved(3, "assistant"), False),  # below summarize_after_seq
     (MessageSaved(5, "user"), False),  # a user message does not end a round
     (MessageSaved(5, "assistant"), True),
     (MessageSaved(5, "tool"), False)],
)
def test_trigger_needs_a_round_end_at_or_after_the_threshold(observed, triggers):
    _, commands = step(WindowState(), observed, 0.0, CFG)
    expected = [RequestSummary(1, 0, 5, None, None, 1, CFG.prompt_version, CFG.model)]
    assert list(commands) == (expected if triggers else [])


def test_trigger_roles_are_configurable():
    config = WindowConfig(trigger_roles=("assistant", "tool"))
    _, commands = step(WindowState(), MessageSaved(5, "tool"), 0.0, config)
    assert [c.memory_id for c in commands] == [1]


def test_a_round_end_while_one_is_in_flight_is_skipped_unless_a_stride_past_the_newest_request():
    """Seed 000 skips a round end while a summary is processing; the backlog rule chains one
    on the newest request once the round end is `replay_stride` (4) seqs past it, as a replay
    would (so a burst asks for the replay's windows)."""
    state, emitted = run(rounds(1, 6))
    assert [(c.memory_id, c.end_seq, c.base_memory_id, c.base_end_seq) for c in emitted] == [
        (1, 5, None, None), (2, 9, 1, 5)]
    assert isinstance(emitted[1], ReplayRequest)
    assert state.in_flight.memory_id == 2 and state.last_seq == 11 and state.last_replay_request == 2


def test_completion_does_not_itself_trigger_and_next_round_end_is_incremental():
    state, emitted = run(rounds(1, 4))
    state, commands = step(state, done(emitted[0]), 1.0, CFG)
    assert commands == () and state.latest_completed == (1, 0, 5) and state.in_flight is None
    state, commands = run(rounds(5, 5, now=2.0), state)
    assert commands == [RequestSummary(2, 0, 9, 1, 5, 1, CFG.prompt_version, CFG.model)]


# --- redelivery and stale results ----------------------------------------------------------

def test_redelivered_messages_do_not_retrigger_or_move_last_seq_back():
    state, emitted = run(rounds(1, 4))  # id=1 requested at seq 5, seq 7 skipped while in flight
    state, _ = step(state, done(emitted[0]), 1.0, CFG)
    for seq in (7, 5, 3, 7):
        state, commands = step(state, MessageSaved(seq, "assistant"), 2.0, CFG)
        assert commands == ()
        assert state.last_seq == 7


@pytest.mark.parametrize(
    "stale",
    [SummaryDone(1, 1, 0, 5),  # duplicate delivery of an applied result
     SummaryDone(99, 1, 0, 99),  # never requested
     SummaryGaveUp(1, 1, "late"),  # failure of a finished request
     SummaryGaveUp(2, 1, "old attempt")],  # attempt 1 failed after attempt 2 was issued
)
def test_stale_results_change_nothing(stale):
    state, emitted = run(rounds(1, 3))
    state, _ = step(state, done(emitted[0]), 1.0, CFG)
    state, emitted = run(rounds(4, 4, now=2.0), state)  # id=2 (0,7) in flight
    state, _ = step(state, Tick(), 2.0 + CFG.request_timeout_s + 1, CFG)  # id=2 attempt 2
    assert state.in_flight.attempt == 2
    after, commands = step(state, stale, 200.0, CFG)
    assert commands == () and after == state


def test_completion_of_an_earlier_attempt_is_accepted():
    state, emitted = run(rounds(1, 3))
    state, reissued = step(state, Tick(), CFG.request_timeout_s + 1, CFG)
    assert [c.attempt for c in reissued] == [2]
    state, _ = step(state, done(emitted[0]), 130.0, CFG)  # attempt 1's result arrives late
    assert state.latest_completed == (1, 0, 5) and state.in_flight is None
    assert (state.completions, state.reissues, state.requests) == (1, 1, 1)


# --- timeouts ------------------------------------------------------------------------------

def test_stuck_request_is_reissued_then_given_up():
    state, _ = run(rounds(1, 3))
    timeout = CFG.request_timeout_s
    state, commands = step(state, Tick(), timeout, CFG)  # exactly at the limit: still waiting
    assert commands == ()
    seen = []
    now = 0.0
    for _ in range(CFG.max_attempts):
        now += timeout + 1
        state, commands = step(state, Tick(), now, CFG)
        seen.extend(commands)
    assert seen[:2] == [RequestSummary(1, 0, 5, None, None, a, CFG.prompt_version, CFG.model) for a in (2, 3)]
    assert isinstance(seen[2], GiveUp) and (seen[2].memory_id, seen[2].attempt) == (1, 3)
    assert state.in_flight is None and state.consecutive_failures == 1
    assert (state.requests, state.reissues, state.failures) == (1, 2, 1)
    # The give-up comes back as summary.failed on the topic: already counted, ignored.
    again, commands = step(state, SummaryGaveUp(1, 3, seen[2].error), now, CFG)
    assert commands == () and again == state


def test_reissue_restarts_the_clock():
    state, _ = run(rounds(1, 3))
    state, _ = step(state, Tick(), 121.0, CFG)
    assert state.in_flight.requested_at == 121.0
    _, commands = step(state, Tick(), 200.0, CFG)
    assert commands == ()


def test_a_message_runs_the_stuck_scan_and_may_start_a_new_window():
    state, _ = run(rounds(1, 3))
    state = evolve(state, RequestSummary(1, 0, 5, None, None, 3, "p", "m"), 0.0, CFG)  # last attempt
    state, _ = step(state, MessageSaved(6, "user"), 1.0, CFG)
    state, commands = step(state, MessageSaved(7, "assistant"), 500.0, CFG)
    assert [type(c).__name__ for c in commands] == ["GiveUp", "RequestSummary"]
    assert (commands[1].memory_id, commands[1].start_seq, commands[1].end_seq) == (2, 0, 7)
    assert commands[1].base_memory_id is None


# --- failures and backoff --------------------------------------------------------------------

def test_failure_keeps_history_and_next_round_end_uses_a_new_id():
    state, emitted = run(rounds(1, 3))
    state, _ = step(state, done(emitted[0]), 1.0, CFG)
    state, emitted = run(rounds(4, 4, now=2.0), state)
    state, commands = step(state, SummaryGaveUp(2, 1, "llm error"), 3.0, CFG)
    assert commands == () and state.in_flight is None and state.consecutive_failures == 1
    state, commands = run(rounds(5, 5, now=4.0), state)
    assert commands == [RequestSummary(3, 0, 9, 1, 5, 1, CFG.prompt_version, CFG.model)]


def fail_until(state, count, now):
    """Fail `count` requests in a row, each one issued by the next round end."""
    for _ in range(count):
        r = state.last_seq // 2 + 2
        state, commands = run(rounds(r, r, now=now), state)
        assert len(commands) == 1, f"round {r} should trigger"
        state, _ = step(state, SummaryGaveUp(commands[0].memory_id, 1, "boom"), now, CFG)
    return state


def test_backoff_after_max_consecutive_failures_then_recovery():
    state, _ = run(rounds(1, 2))
    state = fail_until(state, CFG.max_attempts, now=10.0)
    assert state.consecutive_failures == 3 and state.not_before == 10.0 + CFG.failure_backoff_s
    r = state.last_seq // 2 + 2
    state, commands = run(rounds(r, r, now=39.0), state)  # still backing off
    assert commands == []
    state, commands = run(rounds(r + 1, r + 1, now=40.0), state)
    assert len(commands) == 1 and commands[0].memory_id == 4
    state, _ = step(state, SummaryGaveUp(4, 1, "boom"), 50.0, CFG)  # 4th failure doubles it
    assert state.not_before == 50.0 + 2 * CFG.failure_backoff_s
    state = evolve(state, RequestSummary(5, 0, state.last_seq, None, None, 1, "p", "m"), 200.0, CFG)
    state, _ = step(state, SummaryDone(5, 1, 0, state.last_seq), 201.0, CFG)
    assert (state.consecutive_failures, state.not_before) == (0, 0.0)


def test_backoff_is_capped():
    state = WindowState(consecutive_failures=40, in_flight=None)
    state = evolve(state, RequestSummary(1, 0, 5, None, None, 1, "p", "m"), 0.0, CFG)
    state = evolve(state, SummaryGaveUp(1, 1, "boom"), 0.0, CFG)
    assert state.not_before == CFG.max_backoff_s


# --- state, inputs, config -------------------------------------------------------------------

def test_state_round_trips_through_json():
    state, _ = run(rounds(1, 3))
    state, _ = step(state, SummaryDone(1, 1, 0, 5), 1.0, CFG)
    state, _ = run(rounds(4, 4, now=2.0), state)
    assert state.in_flight is not None and state.latest_completed is not None
    assert WindowState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    assert WindowState.from_dict({}) == WindowState()
    assert WindowState.from_dict({"last_seq": 3, "future_field": 1}) == WindowState(last_seq=3)


def test_decide_is_pure_and_step_is_evolve_then_commands():
    state, _ = run(rounds(1, 2))
    before = state
    commands = decide(state, MessageSaved(5, "assistant"), 0.0, CFG)
    assert state == before and [c.memory_id for c in commands] == [1]
    new, same = step(state, MessageSaved(5, "assistant"), 0.0, CFG)
    assert same == commands and new.in_flight.memory_id == 1 and new.next_memory_id == 2


def _payload(model, **fields):
    common = {"prompt_version": "summary-v1", "model": "m"}
    return model(**{**common, **fields})


@pytest.mark.parametrize(
    ("event_type", "payload", "seq", "expected"),
    [(registry.MESSAGE_APPENDED, events.MessageAppended(role="assistant", content="hi"), 7,
      MessageSaved(7, "assistant")),
     (registry.SUMMARY_COMPLETED, _payload(events.SummaryCompleted, memory_id=2, start_seq=0, end_seq=7,
                                           attempt=2, text="t", generation_time_ms=5), 7, SummaryDone(2, 2, 0, 7)),
     (registry.SUMMARY_FAILED, _payload(events.SummaryFailed, memory_id=2, start_seq=0, end_seq=7, error="x"),
      None, SummaryGaveUp(2, 1, "x")),
     (registry.WINDOW_TICKED, events.WindowTicked(), None, Tick()),
     (registry.SUMMARY_REQUESTED, _payload(events.SummaryRequested, memory_id=1, start_seq=0, end_seq=5),
      5, None)],
)
def test_observe_converts_decoded_payloads(event_type, payload, seq, expected):
    assert observe(event_type, payload, seq) == expected


def test_observe_needs_the_seq_of_a_message():
    with pytest.raises(ValueError):
        observe(registry.MESSAGE_APPENDED, events.MessageAppended(role="user", content="x"), None)


def test_config_from_settings():
    config = WindowConfig.from_settings(
        WindowSettings(window_size=10, summarize_after_seq=3, request_timeout_s=9, max_attempts=2), "v9", "m9")
    assert (config.window_size, config.summarize_after_seq, config.request_timeout_s, config.max_attempts,
            config.prompt_version, config.model) == (10, 3, 9.0, 2, "v9", "m9")


# --- invariants under random interleavings ------------------------------------------------

@pytest.mark.parametrize("seed", range(25))
def test_random_interleavings_keep_the_invariants(seed):
    rng = random.Random(seed)
    state, now, seq = WindowState(), 0.0, -1
    outstanding: int | None = None  # the one memory id requested and not yet resolved
    ids, completed_end = [], -1
    for _ in range(300):
        now += rng.choice([0.0, 1.0, 5.0, 60.0, 130.0])
        pick = rng.random()
        if pick < 0.5:
            seq = seq + 1 if rng.random() < 0.85 else max(0, seq - rng.randint(0, 4))  # some redelivery
            observed = MessageSaved(seq, "assistant" if seq % 2 else "user")
        elif pick < 0.7 and state.in_flight:
            f = state.in_flight
            observed = SummaryDone(f.memory_id, rng.randint(1, f.attempt), f.start_seq, f.end_seq)
        elif pick < 0.8 and state.in_flight:
            observed = SummaryGaveUp(state.in_flight.memory_id, state.in_flight.attempt, "boom")
        elif pick < 0.9 and [i for i in ids if i != outstanding]:
            observed = SummaryDone(rng.choice([i for i in ids if i != outstanding]), 1, 0, 0)  # stale
        else:
            observed = Tick()
        last_seq = state.last_seq
        state, commands = step(state, observed, now, CFG)
        assert state.last_seq >= last_seq
        if isinstance(observed, SummaryDone) and observed.memory_id == outstanding:
            outstanding = None
        if isinstance(observed, SummaryGaveUp) and observed.memory_id == outstanding:
            outstanding = None
        for command in commands:
            if isinstance(command, GiveUp):
                assert command.memory_id == outstanding
                outstanding = None
            elif command.attempt > 1:
                assert command.memory_id == outstanding
            else:
                if outstanding is not None:  # only the backlog rule asks while one is in flight
                    assert isinstance(command, ReplayRequest), "a second request while one is in flight"
                    assert command.base_memory_id == outstanding
                    assert command.end_seq - command.base_end_seq >= CFG.replay_stride
                assert not ids or command.memory_id > ids[-1]
                outstanding = command.memory_id
                ids.append(command.memory_id)
        assert (state.in_flight.memory_id if state.in_flight else None) == outstanding
        end = state.latest_completed[2] if state.latest_completed else -1
        assert end >= completed_end
        completed_end = end

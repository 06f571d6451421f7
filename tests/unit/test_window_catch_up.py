"""Catch-up and the backlog rule: a burst-ingested conversation, or a slow LLM, never leaves the
summary chain stalled, and a burst asks for the windows a replay of the same log asks for."""

from __future__ import annotations

import random

import pytest

from streams.window.agent import looks_due
from domain.window.fold import (
    MessageSaved,
    RequestSummary,
    SummaryDone,
    SummaryGaveUp,
    Tick,
    WindowConfig,
    WindowState,
    calculate_summary_range,
    step,
)

CFG = WindowConfig()


def feed(state, observed, now=0.0, config=CFG):
    state, commands = step(state, observed, now, config)
    return state, list(commands)


def burst(state, first_seq, last_seq, now=0.0, config=CFG):
    """Messages first..last (even seq user, odd seq assistant); returns state and requests."""
    emitted = []
    for seq in range(first_seq, last_seq + 1):
        state, commands = feed(state, MessageSaved(seq, "assistant" if seq % 2 else "user"), now, config)
        emitted += commands
    return state, emitted


def done(command: RequestSummary) -> SummaryDone:
    return SummaryDone(command.memory_id, command.attempt, command.start_seq, command.end_seq)


def replayed(last_seq: int, config=CFG) -> list[tuple]:
    """The requests a replay makes for messages 0..last_seq (historic: the stride rule)."""
    state, emitted = WindowState(), []
    for seq in range(last_seq + 1):
        state, commands = feed(state, MessageSaved(seq, "assistant" if seq % 2 else "user", historic=True),
                               config=config)
        emitted += commands
    return [(c.memory_id, c.start_seq, c.end_seq, c.base_memory_id, c.base_end_seq) for c in emitted]


def test_a_whole_history_in_one_burst_asks_for_the_replays_windows():
    """The backlog rule: a round end that finds a request in flight is chained on the newest
    request every `replay_stride` seqs, so a burst gives the chain a replay of the log gives
    (issue 26: before, 1 + 1 summaries here against the replay's 149, and every diff of a
    replay against the live generation listed the difference)."""
    state, emitted = burst(WindowState(), 0, 599)
    chain = [(c.memory_id, c.start_seq, c.end_seq, c.base_memory_id, c.base_end_seq) for c in emitted]
    assert chain == replayed(599)
    assert len(chain) == 149 and chain[:3] == [(1, 0, 5, None, None), (2, 0, 9, 1, 5), (3, 0, 13, 2, 9)]
    for command in emitted:  # answered in order: nothing more to ask
        state, commands = feed(state, done(command), 1.0)
        assert commands == []
    assert state.latest_completed == (149, 584, 597) and state.in_flight is None
    assert 599 - state.latest_completed[2] < CFG.replay_stride


def test_a_burst_that_outruns_the_llm_stays_a_chain_of_windows_a_stride_apart():
    """Completions of the newest request come back every 50 messages: in between, the round
    ends are chained every stride; after a completion the seed's rule asks again."""
    state, requests = WindowState(), []
    for first in range(0, 1000, 50):
        state, emitted = burst(state, first, first + 49, now=first)
        requests += emitted
        if state.in_flight is not None:
            flight = state.in_flight
            state, commands = feed(state, SummaryDone(flight.memory_id, 1, flight.start_seq, flight.end_seq), first)
            requests += commands
    # Settle whatever is still in flight at the end.
    while state.in_flight is not None:
        flight = state.in_flight
        state, commands = feed(state, SummaryDone(flight.memory_id, 1, flight.start_seq, flight.end_seq), 2000.0)
        requests += commands
    assert len(requests) <= 1000 // CFG.replay_stride + 1000 // 50
    assert 999 - state.latest_completed[2] < CFG.replay_stride
    # A chain: each request is based on the one before it, and within the window.
    for before, after in zip(requests, requests[1:]):
        assert after.base_memory_id == before.memory_id and after.base_end_seq == before.end_seq
        assert 2 <= after.end_seq - before.end_seq <= CFG.replay_stride
        assert after.end_seq - after.start_seq + 1 <= CFG.window_size


def test_a_small_backlog_waits_for_the_next_round_end_as_the_seed_says():
    """Seed 002: id=2 (0-7) completes with round 5 (seq 8-9) pending: no request until round 6 ends."""
    state, emitted = burst(WindowState(), 0, 5)
    state, _ = feed(state, done(emitted[0]), 1.0)
    state, emitted = burst(state, 6, 7, 2.0)
    state, skipped = burst(state, 8, 9, 3.0)
    assert skipped == []
    state, commands = feed(state, done(emitted[0]), 4.0)
    assert commands == []
    state, commands = burst(state, 10, 11, 5.0)
    assert [(c.memory_id, c.start_seq, c.end_seq, c.base_memory_id) for c in commands] == [(3, 0, 11, 2)]


def test_a_failure_with_a_backlog_retries_at_once_then_backs_off_and_the_tick_resumes():
    state, emitted = burst(WindowState(), 0, 99)
    failures = 0
    request = emitted[-1]  # the newest of the chain; the stage fails the ones after a failed base
    while True:
        state, commands = feed(state, SummaryGaveUp(request.memory_id, 1, "llm 500"), 10.0)
        failures += 1
        if not commands:
            break
        (request,) = commands
        assert (request.start_seq, request.end_seq, request.base_memory_id) == (86, 99, None)
    assert failures == CFG.max_attempts  # the fold's backoff after max_attempts failures in a row
    assert state.not_before == 10.0 + CFG.failure_backoff_s
    assert not looks_due(state, 20.0, CFG)
    state, commands = feed(state, Tick(), 20.0)  # still backing off
    assert commands == []
    assert looks_due(state, 41.0, CFG)
    state, commands = feed(state, Tick(), 41.0)
    assert [(c.start_seq, c.end_seq) for c in commands] == [(86, 99)]
    state, commands = feed(state, done(commands[0]), 42.0)
    assert commands == [] and state.latest_completed[2] == 99 and not looks_due(state, 43.0, CFG)


def test_the_backlog_limit_is_a_setting():
    config = WindowConfig(catch_up_backlog=2)
    state, emitted = burst(WindowState(), 0, 7, config=config)  # 7 is less than a stride past 5
    state, commands = feed(state, done(emitted[0]), 1.0, config)
    assert [(c.start_seq, c.end_seq) for c in commands] == [(0, 7)]  # 2 messages past seq 5


def test_historic_messages_never_catch_up_so_a_replay_stays_deterministic():
    state, emitted = WindowState(), []
    for seq in range(0, 100):
        state, commands = feed(state, MessageSaved(seq, "assistant" if seq % 2 else "user", historic=True))
        emitted += commands
    assert state.pending_end == -1
    for command in emitted:
        state, commands = feed(state, done(command), 1.0)
        assert commands == []


def test_a_tick_with_nothing_due_does_nothing():
    state, emitted = burst(WindowState(), 0, 9)
    state, _ = feed(state, done(emitted[0]), 1.0)
    assert not looks_due(state, 2.0, CFG)
    after, commands = feed(state, Tick(), 2.0)
    assert commands == [] and after == state


@pytest.mark.parametrize("seed", range(10))
def test_random_bursts_and_answers_end_with_the_chain_near_the_end(seed):
    """Whatever the interleaving, once everything settled the summary is within a backlog of the end."""
    rng = random.Random(seed)
    state, seq, requests, now = WindowState(), -1, 0, 0.0
    last = rng.randint(200, 800)
    while seq < last or state.in_flight is not None:
        now += 1.0
        if seq < last and rng.random() < 0.8:
            state, emitted = burst(state, seq + 1, min(last, seq + rng.randint(1, 60)), now)
            seq = state.last_seq
        elif state.in_flight is not None:
            flight = state.in_flight
            answer = (SummaryDone(flight.memory_id, flight.attempt, flight.start_seq, flight.end_seq)
                      if rng.random() < 0.9 else SummaryGaveUp(flight.memory_id, flight.attempt, "boom"))
            state, emitted = feed(state, answer, now)
        else:
            continue
        requests += len(emitted)
        if state.in_flight is None and state.not_before > now:  # backing off: the timer ticks later
            now = state.not_before
            state, emitted = feed(state, Tick(), now)
            requests += len(emitted)
    assert state.latest_completed is not None
    assert last - state.latest_completed[2] < CFG.window_size
    assert requests <= last // 2  # fewer than one per round: a burst costs one per stride (4 seqs)

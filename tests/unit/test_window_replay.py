"""Replay mode of the window fold: historic messages get the same windows whatever the timing."""

from __future__ import annotations

import random

import pytest

from domain.window.fold import (
    MessageSaved, RequestSummary, SummaryDone, WindowConfig, WindowState, step,
)

CFG = WindowConfig(replay_stride=4)


def replay(messages: int, completion_chance: float, seed: int) -> list[tuple]:
    """Feed historic rounds; complete outstanding requests at random moments."""
    rng = random.Random(seed)
    state, outstanding, requested = WindowState(), [], []
    for seq in range(messages):
        state, commands = step(state, MessageSaved(seq, "assistant" if seq % 2 else "user", historic=True), 0.0, CFG)
        for c in commands:
            assert isinstance(c, RequestSummary)
            requested.append((c.memory_id, c.start_seq, c.end_seq, c.base_memory_id, c.base_end_seq))
            outstanding.append(c)
        while outstanding and rng.random() < completion_chance:
            done = outstanding.pop(0)
            state, _ = step(state, SummaryDone(done.memory_id, 1, done.start_seq, done.end_seq), 0.0, CFG)
    return requested


def test_historic_rounds_are_summarized_every_stride_chained_on_the_previous_request():
    assert replay(20, completion_chance=0.0, seed=0) == [
        (1, 0, 5, None, None),
        (2, 0, 9, 1, 5),
        (3, 0, 13, 2, 9),
        (4, 4, 17, 3, 13),
    ]


@pytest.mark.parametrize("seed", range(10))
def test_the_windows_do_not_depend_on_when_results_come_back(seed):
    assert replay(60, completion_chance=random.Random(seed).random(), seed=seed) == replay(60, 0.0, 0)


def test_chained_completions_move_the_latest_summary_forward_only():
    state = WindowState()
    requests = []
    for seq in range(14):
        state, commands = step(state, MessageSaved(seq, "assistant" if seq % 2 else "user", historic=True), 0.0, CFG)
        requests += commands
    assert [r.memory_id for r in requests] == [1, 2, 3]
    third, first = requests[2], requests[0]
    state, _ = step(state, SummaryDone(3, 1, third.start_seq, third.end_seq), 0.0, CFG)
    assert state.latest_completed == (3, 0, 13)
    state, _ = step(state, SummaryDone(1, 1, first.start_seq, first.end_seq), 0.0, CFG)
    assert state.latest_completed == (3, 0, 13)


def test_live_messages_after_the_history_follow_the_seed_rules_again():
    state = WindowState()
    for seq in range(14):
        state, _ = step(state, MessageSaved(seq, "assistant" if seq % 2 else "user", historic=True), 0.0, CFG)
    state, _ = step(state, SummaryDone(3, 1, 0, 13), 0.0, CFG)
    state, commands = step(state, MessageSaved(14, "user"), 0.0, CFG)
    assert commands == ()
    state, commands = step(state, MessageSaved(15, "assistant"), 0.0, CFG)
    assert [(c.memory_id, c.start_seq, c.end_seq, c.base_memory_id) for c in commands] == [(4, 2, 15, 3)]
    # Live rule: nothing more while it is in flight.
    state, commands = step(state, MessageSaved(16, "user"), 0.0, CFG)
    state, commands = step(state, MessageSaved(17, "assistant"), 0.0, CFG)
    assert commands == ()


def test_a_stale_completion_in_live_mode_still_changes_nothing():
    state = WindowState()
    for seq in range(6):
        state, commands = step(state, MessageSaved(seq, "assistant" if seq % 2 else "user"), 0.0, CFG)
    state, _ = step(state, SummaryDone(7, 1, 0, 99), 0.0, CFG)
    assert state.latest_completed is None and state.in_flight is not None

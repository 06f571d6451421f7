"""A request for a window that is already settled gets its stored result again, never an LLM
call and never silence: the fold re-issues a request whose result it has not seen, and an
unanswered re-issue stalled the conversation until the fold gave up (the two-worker takeover)."""

from __future__ import annotations

import pytest

from domain.window.fold import (
    MessageSaved,
    RequestSummary,
    SummaryDone,
    Tick,
    WindowConfig,
    WindowState,
    step,
)
from streams.window.summarize import settled_answer

CFG = WindowConfig(window_size=6, summarize_after_seq=3, request_timeout_s=30.0, max_attempts=3)


@pytest.mark.parametrize(
    ("status", "attempt", "request_attempt", "answer"),
    [
        (None, None, 1, "compute"),  # first delivery
        ("processing", 1, 1, "compute"),  # redelivered after a crash during the LLM call
        ("processing", 1, 2, "compute"),  # re-issued while the first attempt never came back
        ("processing", 2, 1, "skip"),  # an old attempt redelivered: the newer one answers
        ("completed", 1, 1, "completed"),  # redelivered after it was answered
        ("completed", 1, 2, "completed"),  # re-issued by a fold that never saw the answer
        ("completed", 3, 2, "completed"),
        ("failed", 2, 2, "failed"),  # the same attempt again: its failure again
        ("failed", 1, 2, "compute"),  # a newer attempt revives a row failed by an older one
        ("failed", 3, 2, "skip"),
    ],
)
def test_what_a_request_gets_given_its_memory_row(status, attempt, request_attempt, answer):
    assert settled_answer(status, attempt, request_attempt) == answer


def test_a_fold_that_lost_a_result_gets_it_again_after_one_request_timeout():
    """The state a new owner restores holds memory 1 in flight, but the result of memory 1 was
    applied (and committed past) by the old owner: it never comes to this fold again."""
    state = WindowState()
    requests = []
    for seq in range(4):  # 0..3: the round end 3 requests 0-3
        state, commands = step(state, MessageSaved(seq, "assistant" if seq % 2 else "user"), 0.0, CFG)
        requests += commands
    (first,) = requests
    assert isinstance(first, RequestSummary) and state.in_flight.memory_id == first.memory_id
    row = ("completed", first.attempt)  # what the memory projection holds by now
    for seq in range(4, 7):  # the conversation goes on: nothing new while 1 is in flight (less than
        # replay_stride past it; further on, the backlog rule would chain requests on it)
        state, commands = step(state, MessageSaved(seq, "assistant" if seq % 2 else "user"), 1.0, CFG)
        assert commands == ()

    state, (reissued,) = step(state, Tick(), 1.0 + CFG.request_timeout_s + 1, CFG)
    assert (reissued.memory_id, reissued.attempt) == (first.memory_id, 2)

    assert settled_answer(*row, reissued.attempt) == "completed"  # the stage sends the stored result
    again = SummaryDone(first.memory_id, first.attempt, first.start_seq, first.end_seq)
    state, commands = step(state, again, 40.0, CFG)
    assert state.latest_completed == (first.memory_id, first.start_seq, first.end_seq)
    assert commands == ()  # the backlog 4..5 is below catch_up_backlog: the next round end asks
    state, (following,) = step(state, MessageSaved(7, "assistant"), 41.0, CFG)
    assert (following.start_seq, following.end_seq, following.base_memory_id) == (2, 7, first.memory_id)

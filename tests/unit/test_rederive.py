"""Re-derivation after an erasure (docs/lineage.md, "Mixed rows"): the window fold's re-derive
request and the sender's plan for one erasure_rederive row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.rederive import plan
from domain.window.fold import MessageSaved, Rederive, RequestSummary, SummaryDone, WindowConfig, WindowState, step

CFG = WindowConfig(window_size=6, summarize_after_seq=3)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def talk(state, first, last):
    emitted = []
    for seq in range(first, last + 1):
        state, commands = step(state, MessageSaved(seq, "assistant" if seq % 2 else "user"), 0.0, CFG)
        for command in commands:
            state, more = step(state, SummaryDone(command.memory_id, command.attempt, command.start_seq,
                                                  command.end_seq), 0.0, CFG)
            emitted += [command, *more]
    return state, emitted


def test_rederive_asks_from_the_kept_base_to_the_newest_end_once_per_erasure():
    state, emitted = talk(WindowState(), 0, 15)
    ends = [(c.memory_id, c.end_seq) for c in emitted]
    assert ends == [(1, 3), (2, 5), (3, 7), (4, 9), (5, 11), (6, 13), (7, 15)]
    # Erased seqs from 8 on: summaries 4.. were deleted, summary 3 (ending at 7) is kept.
    state, commands = step(state, Rederive("erasure-1", 8, 3, 7), 0.0, CFG)
    assert commands == (RequestSummary(8, 8, 15, 3, 7, 1, CFG.prompt_version, CFG.model),)
    assert state.in_flight.memory_id == 8 and state.last_rederive == "erasure-1"
    again, repeated = step(state, Rederive("erasure-1", 8, 3, 7), 0.0, CFG)  # a redelivery
    assert repeated == () and again == state
    state, _ = step(state, SummaryDone(8, 1, 8, 15), 0.0, CFG)
    assert state.latest_completed == (8, 8, 15) and state.in_flight is None
    # The next summaries chain on the re-derived one, never on a deleted one.
    state, emitted = talk(state, 16, 17)
    assert [(c.base_memory_id, c.base_end_seq) for c in emitted] == [(8, 15)]


def test_rederive_without_a_kept_summary_starts_at_zero_and_nothing_to_do_before_the_first_summary():
    state, _ = talk(WindowState(), 0, 9)
    _, commands = step(state, Rederive("e", 1, None, None), 0.0, CFG)
    assert [(c.start_seq, c.end_seq, c.base_memory_id) for c in commands] == [(0, 9, None)]
    quiet, _ = talk(WindowState(), 0, 2)  # no summary yet: nothing was deleted
    assert step(quiet, Rederive("e", 1, None, None), 0.0, CFG)[1] == ()
    _, commands = step(state, Rederive("e", 12, 4, 11), 0.0, CFG)  # erased after the newest summary
    assert commands == ()


def test_plan_sends_the_summary_once_and_chunks_until_recorded_then_gives_up():
    ranges = [(0, 4), (4, 8), (8, 12)]
    common = dict(ranges=ranges, window=True, facts=True, resend_after_s=60, max_attempts=2, now=NOW)
    first = plan(attempts=0, sent_at=None, recorded=set(), with_messages={(0, 4), (4, 8)}, **common)
    assert first.summary and first.chunks == ((0, 4), (4, 8)) and first.sent and first.done is None
    waiting = plan(attempts=1, sent_at=NOW - timedelta(seconds=5), recorded={(0, 4)},
                   with_messages={(0, 4), (4, 8)}, **common)
    assert not waiting.summary and waiting.chunks == () and waiting.done is None and not waiting.sent
    resend = plan(attempts=1, sent_at=NOW - timedelta(seconds=61), recorded={(0, 4)},
                  with_messages={(0, 4), (4, 8)}, **common)
    assert not resend.summary and resend.chunks == ((4, 8),) and resend.sent
    assert plan(attempts=2, sent_at=NOW - timedelta(seconds=61), recorded={(0, 4)}, with_messages={(0, 4), (4, 8)},
                **common).done == "gave up: chunks [[4, 8]] after 2 attempts"
    finished = plan(attempts=1, sent_at=NOW, recorded={(0, 4), (4, 8)}, with_messages={(0, 4), (4, 8)}, **common)
    assert finished.done == "done" and not finished.summary and finished.chunks == ()
    nothing = plan(attempts=0, sent_at=None, recorded=set(), with_messages=set(), **common)
    assert nothing.summary and nothing.done == "done"  # no chunk to redo: the summary request only
    no_window = plan(attempts=0, sent_at=None, recorded=set(), with_messages=set(), **common | {"window": False})
    assert not no_window.summary and no_window.done == "done"

"""Seed 002's Round 1-10 simulation and seed 000's data-flow timeline, message by message."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from streams.window.context import MemoryRow, Message, TurnContext, assemble_context
from domain.window.fold import GiveUp, MessageSaved, RequestSummary, SummaryDone, WindowConfig, WindowState, step

CFG = WindowConfig()  # window_size=14, summarize_after_seq=5, as in both seeds


def apply_memory_event(rows: dict[int, MemoryRow], item) -> dict[int, MemoryRow]:
    """The memory table as the projector keeps it: a request inserts 'processing'."""
    if isinstance(item, RequestSummary) and item.memory_id not in rows:
        row = MemoryRow(item.memory_id, item.start_seq, item.end_seq, item.base_memory_id, "processing")
        return {**rows, item.memory_id: row}
    if isinstance(item, GiveUp):
        return {**rows, item.memory_id: replace(rows[item.memory_id], status="failed")}
    if isinstance(item, tuple):  # (SummaryDone, text)
        done, text = item
        return {**rows, done.memory_id: replace(rows[done.memory_id], status="completed", text=text)}
    return rows


@dataclass(frozen=True)
class Round:
    context: TurnContext  # assembled at round START, before the user message
    triggered: tuple[RequestSummary, ...]  # emitted at round END
    table: tuple[tuple, ...]  # (id, start, end, base_id, status) after round END


def table_of(rows: dict[int, MemoryRow]) -> tuple[tuple, ...]:
    return tuple((m.memory_id, m.start_seq, m.end_seq, m.base_memory_id, m.status)
                 for m in sorted(rows.values(), key=lambda m: m.memory_id))


def simulate(complete_after: set[int], last_round: int = 10) -> tuple[dict[int, Round], tuple]:
    """Round r is user seq 2r-2 then assistant seq 2r-1. After the rounds in
    `complete_after`, the in-flight summary completes before the next round starts.
    Returns each round's record and the memory table at the very end."""
    state, rows, history, now = WindowState(), {}, [], 0.0
    result = {}
    for r in range(1, last_round + 1):
        context = assemble_context(rows.values(), history, before_seq=2 * r - 2)
        triggered = []
        for seq, role in ((2 * r - 2, "user"), (2 * r - 1, "assistant")):
            now += 1.0
            history.append(Message(seq, role, f"Round {r} {'question' if role == 'user' else 'answer'}"))
            state, commands = step(state, MessageSaved(seq, role), now, CFG)
            triggered.extend(c for c in commands if isinstance(c, RequestSummary))
            for command in commands:
                rows = apply_memory_event(rows, command)
        result[r] = Round(context, tuple(triggered), table_of(rows))
        if r in complete_after:
            f = state.in_flight
            done = SummaryDone(f.memory_id, f.attempt, f.start_seq, f.end_seq)
            state, commands = step(state, done, now + 0.5, CFG)
            assert commands == ()  # a completion never triggers by itself
            rows = apply_memory_event(rows, (done, f"summary of {f.start_seq}-{f.end_seq}"))
    return result, table_of(rows)


# --- seed 002: Round 1-10, mixed catch-up / not catch-up -------------------------------------

SEED_002, SEED_002_FINAL = simulate(complete_after={3, 5, 7, 9})

P, C = "processing", "completed"
ROW1, ROW2, ROW3, ROW4 = (1, 0, 5, None), (2, 0, 7, 1), (3, 0, 11, 2), (4, 2, 15, 3)


@pytest.mark.parametrize(
    ("r", "table"),
    [(1, ()), (2, ()),
     (3, ((*ROW1, P),)),
     (4, ((*ROW1, C), (*ROW2, P))),
     (5, ((*ROW1, C), (*ROW2, P))),  # unchanged: id=2 still processing
     (6, ((*ROW1, C), (*ROW2, C), (*ROW3, P))),
     (7, ((*ROW1, C), (*ROW2, C), (*ROW3, P))),
     (8, ((*ROW1, C), (*ROW2, C), (*ROW3, C), (*ROW4, P))),
     (9, ((*ROW1, C), (*ROW2, C), (*ROW3, C), (*ROW4, P))),
     (10, ((*ROW1, C), (*ROW2, C), (*ROW3, C), (*ROW4, C), (5, 6, 19, 4, P)))],
)
def test_seed_002_memory_table_after_each_round(r, table):
    assert SEED_002[r].table == table


@pytest.mark.parametrize(
    ("r", "mode", "memory_id", "gap"),
    [(1, "raw", None, ()), (2, "raw", None, (0, 1)), (3, "raw", None, (0, 1, 2, 3)),
     (4, "caught_up", 1, ()),  # current question only, no gap
     (5, "fallback", 1, (6, 7)),
     (6, "caught_up", 2, (8, 9)),
     (7, "fallback", 2, (8, 9, 10, 11)),
     (8, "caught_up", 3, (12, 13)),
     (9, "fallback", 3, (12, 13, 14, 15)),
     (10, "caught_up", 4, (16, 17))],
)
def test_seed_002_context_at_each_round_start(r, mode, memory_id, gap):
    context = SEED_002[r].context
    assert context.mode == mode
    assert (context.summary.memory_id if context.summary else None) == memory_id
    assert context.gap_seqs == gap and context.missing == ()


@pytest.mark.parametrize(
    ("r", "trigger"),
    [(1, None), (2, None), (3, (1, 0, 5, None)), (4, (2, 0, 7, 1)), (5, None), (6, (3, 0, 11, 2)),
     (7, None), (8, (4, 2, 15, 3)), (9, None), (10, (5, 6, 19, 4))],
)
def test_seed_002_timeline_trigger_at_round_end(r, trigger):
    got = [(c.memory_id, c.start_seq, c.end_seq, c.base_memory_id) for c in SEED_002[r].triggered]
    assert got == ([trigger] if trigger else [])


def test_seed_002_round_5_gap_is_round_4_question_and_answer():
    assert [(m.role, m.content) for m in SEED_002[5].context.gap] == [
        ("user", "Round 4 question"), ("assistant", "Round 4 answer")]


def test_seed_002_requests_are_incremental_from_their_base():
    requests = [c for r in SEED_002.values() for c in r.triggered]
    assert [c.base_end_seq for c in requests] == [None, 5, 7, 11, 15]


# --- seed 000: data-flow timeline and memory table evolution ----------------------------------

SEED_000, SEED_000_FINAL = simulate(complete_after={4, 6, 7, 9, 10})


def test_seed_000_round_3_triggers_id_1():
    assert SEED_000[3].table == ((1, 0, 5, None, P),)


def test_seed_000_round_4_reads_raw_and_skips_while_id_1_processes():
    context = SEED_000[4].context
    assert (context.mode, context.summary, context.gap_seqs) == ("raw", None, tuple(range(0, 6)))
    assert SEED_000[4].triggered == () and SEED_000[4].table == ((1, 0, 5, None, P),)


def test_seed_000_round_5_uses_id_1_then_triggers_id_2_from_it():
    context = SEED_000[5].context
    assert (context.mode, context.summary.memory_id, context.gap_seqs) == ("caught_up", 1, (6, 7))
    (request,) = SEED_000[5].triggered
    assert (request.memory_id, request.start_seq, request.end_seq) == (2, 0, 9)
    assert (request.base_memory_id, request.base_end_seq) == (1, 5)


def test_seed_000_round_8_starts_sliding():
    (request,) = SEED_000[8].triggered
    assert (request.start_seq, request.end_seq) == (2, 15)


def test_seed_000_memory_table_evolution():
    # Seed 000's table shows every row completed: id=5 completes after round 10 here.
    assert SEED_000_FINAL == (
        (1, 0, 5, None, C), (2, 0, 9, 1, C), (3, 0, 13, 2, C), (4, 2, 15, 3, C), (5, 6, 19, 4, C))


@pytest.mark.parametrize(("r", "skipped"), [(4, True), (6, True), (9, True), (7, False), (8, False)])
def test_seed_000_round_ends_skip_only_while_a_summary_is_processing(r, skipped):
    assert (SEED_000[r].triggered == ()) is skipped


def test_seed_002_final_table():
    assert SEED_002_FINAL == (
        (*ROW1, C), (*ROW2, C), (*ROW3, C), (*ROW4, C), (5, 6, 19, 4, P))

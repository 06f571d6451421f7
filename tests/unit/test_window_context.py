"""Turn-start context: raw, caught-up and fallback modes, gap messages and watermarks."""

from __future__ import annotations

import pytest

from streams.window.context import MemoryRow, Message, Summary, assemble_context


def messages(first: int, last: int) -> list[Message]:
    return [Message(seq, "user" if seq % 2 == 0 else "assistant", f"m{seq}") for seq in range(first, last + 1)]


def row(memory_id, start, end, base, status):
    text = f"summary {memory_id}" if status == "completed" else None
    return MemoryRow(memory_id, start, end, base, status, text)


C1 = row(1, 0, 5, None, "completed")
C2 = row(2, 0, 7, 1, "completed")
P2 = row(2, 0, 7, 1, "processing")
F2 = row(2, 0, 7, 1, "failed")
P3 = row(3, 0, 9, 1, "processing")


@pytest.mark.parametrize(
    ("rows", "before_seq", "mode", "memory_id", "gap"),
    [([], 0, "raw", None, ()),  # first turn: nothing at all
     ([], 6, "raw", None, tuple(range(0, 6))),
     ([row(1, 0, 5, None, "processing")], 6, "raw", None, tuple(range(0, 6))),  # seed 000, round 4
     ([C1], 6, "caught_up", 1, ()),  # seed 002, round 4: no gap
     ([C1], 8, "caught_up", 1, (6, 7)),  # seed 000, round 5
     ([C1, P2], 8, "fallback", 1, (6, 7)),  # seed 002, round 5
     ([C1, C2], 10, "caught_up", 2, (8, 9)),
     ([C1, F2], 10, "caught_up", 1, (6, 7, 8, 9)),  # a failed row is history, not the newest
     ([C1, F2, P3], 12, "fallback", 1, tuple(range(6, 12))),
     ([C1, C2], 7, "caught_up", 1, (6,)),  # id=2 reaches the current message: not visible yet
     ([C1, C2], None, "caught_up", 2, tuple(range(8, 12)))],  # default: everything projected
)
def test_mode_summary_and_gap(rows, before_seq, mode, memory_id, gap):
    context = assemble_context(rows, messages(0, 11), before_seq=before_seq)
    assert context.mode == mode
    assert (context.summary.memory_id if context.summary else None) == memory_id
    assert context.gap_seqs == gap
    assert context.missing == ()


def test_summary_and_watermarks():
    context = assemble_context([C1, P2], messages(0, 9), before_seq=8)
    assert context.summary == Summary(1, 0, 5, "summary 1")
    assert (context.summary_end_seq, context.last_seq) == (5, 7)
    assert [m.content for m in context.gap] == ["m6", "m7"]


@pytest.mark.parametrize(
    ("rows", "msgs", "before_seq", "summary_end", "last_seq"),
    [([], [], 0, None, None),
     ([], messages(0, 3), None, None, 3),
     ([C1], messages(0, 5), 6, 5, 5),  # caught up exactly: no gap, watermark is the summary
     ([C1], messages(0, 9), None, 5, 9)],
)
def test_watermark_fields(rows, msgs, before_seq, summary_end, last_seq):
    context = assemble_context(rows, msgs, before_seq=before_seq)
    assert (context.summary_end_seq, context.last_seq) == (summary_end, last_seq)


def test_latest_completed_is_by_end_seq_not_by_list_order():
    context = assemble_context([C2, C1], messages(0, 9), before_seq=10)
    assert context.summary.memory_id == 2 and context.gap_seqs == (8, 9)


def test_messages_are_sorted_and_deduplicated():
    shuffled = list(reversed(messages(0, 9))) + messages(6, 7)
    context = assemble_context([C1], shuffled, before_seq=10)
    assert context.gap_seqs == (6, 7, 8, 9)


@pytest.mark.parametrize(
    ("seqs", "before_seq", "missing"),
    [((6, 9), 12, ((7, 8), (10, 11))),
     ((8,), 9, ((6, 7),)),
     ((6, 7), None, ()),  # without before_seq only holes inside what is projected count
     ((6, 9), None, ((7, 8),)),
     ((), 8, ((6, 7),))],
)
def test_missing_gap_seqs_are_reported_as_ranges(seqs, before_seq, missing):
    msgs = messages(0, 5) + [Message(seq, "user", "x") for seq in seqs]
    context = assemble_context([C1], msgs, before_seq=before_seq)
    assert context.missing == missing
    assert context.gap_seqs == tuple(seqs)


def test_completed_row_without_text_yields_empty_summary_text():
    context = assemble_context([MemoryRow(1, 0, 5, None, "completed")], messages(0, 5), before_seq=6)
    assert context.summary.text == ""

"""The verbatim gap stays bounded when the summary lags, and says exactly what it left out."""

from __future__ import annotations

import json

import pytest

from streams.window.context import (
    MESSAGE_OVERHEAD_BYTES,
    MemoryRow,
    Message,
    assemble_context,
    bound_gap,
    message_bytes,
)


def messages(first: int, last: int, size: int = 10) -> list[Message]:
    return [Message(seq, "user" if seq % 2 == 0 else "assistant", f"{seq:>{size}}") for seq in range(first, last + 1)]


C1 = MemoryRow(1, 0, 5, None, "completed", "summary 1")
P2 = MemoryRow(2, 0, 7, 1, "processing")


@pytest.mark.parametrize(
    ("rows", "mode", "first_gap_seq"), [([], "raw", 0), ([C1], "caught_up", 6), ([C1, P2], "fallback", 6)]
)
def test_a_lagging_summary_keeps_the_newest_messages_and_names_the_rest(rows, mode, first_gap_seq):
    context = assemble_context(rows, messages(0, 599), 600, max_messages=40)
    assert context.mode == mode  # the seed's modes keep their meaning: which summary, and is one coming
    assert context.gap_seqs == tuple(range(560, 600))
    assert context.omitted == (first_gap_seq, 559) and context.omitted_count == 560 - first_gap_seq
    assert context.missing == () and context.last_seq == 599


def test_the_byte_limit_keeps_whole_messages_newest_first():
    gap = messages(0, 99, size=1000)
    each = message_bytes(gap[0])
    assert each == len(json.dumps(gap[0].content)) + MESSAGE_OVERHEAD_BYTES
    kept = bound_gap(gap, None, 10 * each + each // 2)
    assert [m.seq for m in kept] == list(range(90, 100))


def test_multibyte_and_escaped_content_counts_as_json_bytes():
    message = Message(0, "user", 'ü"\n' * 100)
    encoded = json.dumps(message.content, ensure_ascii=False).encode()
    assert message_bytes(message) == len(encoded) + MESSAGE_OVERHEAD_BYTES
    assert message_bytes(message) > 400  # 2 + 2 + 2 bytes per repetition


def test_a_newest_message_over_the_byte_limit_leaves_the_gap_empty_and_says_so():
    context = assemble_context([C1], [*messages(6, 8), Message(9, "assistant", "x" * 5000)], 10, max_bytes=1000)
    assert context.gap == () and context.omitted == (6, 9) and context.omitted_count == 4
    assert context.last_seq == 5  # the summary's end: nothing after it is shown


def test_within_the_limits_nothing_is_omitted():
    context = assemble_context([C1], messages(0, 11), 12, max_messages=6, max_bytes=10_000)
    assert context.gap_seqs == tuple(range(6, 12)) and context.omitted is None and context.omitted_count == 0


def test_holes_are_reported_only_inside_the_returned_part():
    history = [m for m in messages(0, 99) if m.seq not in (10, 95)]
    context = assemble_context([], history, 100, max_messages=10)
    assert context.gap_seqs == (89, 90, 91, 92, 93, 94, 96, 97, 98, 99)
    assert context.omitted == (0, 88) and context.omitted_count == 88  # 89 seqs, seq 10 never projected
    assert context.missing == ((95, 95),)


def test_no_limits_is_the_seed_behaviour():
    context = assemble_context([C1], messages(0, 599), 600)
    assert len(context.gap) == 594 and context.omitted is None

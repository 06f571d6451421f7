"""Turn-start context from memory rows and projected messages (seed 000/002 read side)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Status = Literal["processing", "completed", "failed"]
Mode = Literal["raw", "caught_up", "fallback"]


@dataclass(frozen=True)
class MemoryRow:
    memory_id: int
    start_seq: int
    end_seq: int
    base_memory_id: int | None
    status: Status
    text: str | None = None


@dataclass(frozen=True)
class Message:
    seq: int
    role: str
    content: str


@dataclass(frozen=True)
class Summary:
    memory_id: int
    start_seq: int
    end_seq: int
    text: str


@dataclass(frozen=True)
class TurnContext:
    """Summary up to `summary_end_seq`, then `gap` verbatim up to `last_seq`."""

    mode: Mode
    summary: Summary | None
    gap: tuple[Message, ...]
    summary_end_seq: int | None
    # Highest seq this context reflects (summary end or last gap message); None if empty.
    last_seq: int | None
    # Inclusive (first, last) seq ranges the gap should hold but the projection lacks.
    missing: tuple[tuple[int, int], ...] = ()
    # Inclusive (first, last) seqs of the gap left out to keep it within its limits (the
    # oldest ones: the newest matter most at turn start); None when nothing was left out.
    omitted: tuple[int, int] | None = None
    # How many of the given messages fall in `omitted` (exact when all of them were given).
    omitted_count: int = 0

    @property
    def gap_seqs(self) -> tuple[int, ...]:
        return tuple(message.seq for message in self.gap)


# JSON around one gap message besides its content (seq, role, occurred_at and the keys).
MESSAGE_OVERHEAD_BYTES = 96


def message_bytes(message: Message) -> int:
    """What one gap message adds to a JSON response, about."""
    return len(json.dumps(message.content, ensure_ascii=False).encode()) + MESSAGE_OVERHEAD_BYTES


def bound_gap(gap: Sequence[Message], max_messages: int | None, max_bytes: int | None) -> tuple[Message, ...]:
    """The newest messages of `gap` (in seq order) within both limits; None means no limit.

    Whole messages only: if the newest alone is over `max_bytes`, nothing is kept."""
    kept: list[Message] = []
    size = 0
    for message in reversed(gap):
        if max_messages is not None and len(kept) >= max_messages:
            break
        size += message_bytes(message)
        if max_bytes is not None and size > max_bytes:
            break
        kept.append(message)
    return tuple(reversed(kept))


def assemble_context(rows: Iterable[MemoryRow], messages: Iterable[Message],
                     before_seq: int | None = None, *, max_messages: int | None = None,
                     max_bytes: int | None = None) -> TurnContext:
    """Latest completed summary plus the messages after it, all before `before_seq`.

    `before_seq` is the current message's seq: it and anything later are left out, and so
    are summaries that reach it (they did not exist yet for this turn). Default: all.
    When the summary lags, the gap keeps its newest messages within `max_messages` and
    `max_bytes` and names the seqs it left out (`omitted`).
    """
    visible = [row for row in rows if before_seq is None or row.end_seq < before_seq]
    completed = [row for row in visible if row.status == "completed"]
    latest = max(completed, key=lambda row: (row.end_seq, row.memory_id), default=None)
    live = [row for row in visible if row.status != "failed"]
    newest = max(live, key=lambda row: row.memory_id, default=None)

    history = sorted(
        {m.seq: m for m in messages if before_seq is None or m.seq < before_seq}.values(),
        key=lambda m: m.seq,
    )
    first = latest.end_seq + 1 if latest else 0
    whole = tuple(m for m in history if m.seq >= first)
    gap = bound_gap(whole, max_messages, max_bytes)
    # Ordering of the checks matters: no completed row means raw even if one is processing.
    if latest is None:
        mode: Mode = "raw"
    elif newest is None or newest.status == "completed":
        mode = "caught_up"
    else:
        mode = "fallback"

    upper = before_seq - 1 if before_seq is not None else (whole[-1].seq if whole else first - 1)
    omitted = None
    if len(gap) < len(whole):
        omitted = (first, gap[0].seq - 1 if gap else upper)
    missing = _holes(omitted[1] + 1 if omitted else first, upper, [m.seq for m in gap])

    summary = Summary(latest.memory_id, latest.start_seq, latest.end_seq, latest.text or "") if latest else None
    ends = [seq for seq in (latest.end_seq if latest else None, gap[-1].seq if gap else None) if seq is not None]
    return TurnContext(
        mode=mode, summary=summary, gap=gap,
        summary_end_seq=latest.end_seq if latest else None,
        last_seq=max(ends) if ends else None, missing=missing,
        omitted=omitted, omitted_count=len(whole) - len(gap),
    )


def _holes(first: int, last: int, seqs: list[int]) -> tuple[tuple[int, int], ...]:
    """Ranges in first..last not covered by the sorted, unique `seqs`."""
    holes, expected = [], first
    for seq in [*seqs, last + 1]:
        if seq > expected:
            holes.append((expected, min(seq, last + 1) - 1))
        expected = max(expected, seq + 1)
    return tuple(hole for hole in holes if hole[0] <= hole[1])

"""Turn-start context from memory rows and projected messages (seed 000/002 read side)."""

from __future__ import annotations

from collections.abc import Iterable
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

    @property
    def gap_seqs(self) -> tuple[int, ...]:
        return tuple(message.seq for message in self.gap)


def assemble_context(rows: Iterable[MemoryRow], messages: Iterable[Message],
                     before_seq: int | None = None) -> TurnContext:
    """Latest completed summary plus the messages after it, all before `before_seq`.

    `before_seq` is the current message's seq: it and anything later are left out, and so
    are summaries that reach it (they did not exist yet for this turn). Default: all.
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
    gap = tuple(m for m in history if m.seq >= first)
    # Ordering of the checks matters: no completed row means raw even if one is processing.
    if latest is None:
        mode: Mode = "raw"
    elif newest is None or newest.status == "completed":
        mode = "caught_up"
    else:
        mode = "fallback"

    upper = before_seq - 1 if before_seq is not None else (gap[-1].seq if gap else first - 1)
    missing = _holes(first, upper, [m.seq for m in gap])

    summary = Summary(latest.memory_id, latest.start_seq, latest.end_seq, latest.text or "") if latest else None
    ends = [seq for seq in (latest.end_seq if latest else None, gap[-1].seq if gap else None) if seq is not None]
    return TurnContext(
        mode=mode, summary=summary, gap=gap,
        summary_end_seq=latest.end_seq if latest else None,
        last_seq=max(ends) if ends else None, missing=missing,
    )


def _holes(first: int, last: int, seqs: list[int]) -> tuple[tuple[int, int], ...]:
    """Ranges in first..last not covered by the sorted, unique `seqs`."""
    holes, expected = [], first
    for seq in [*seqs, last + 1]:
        if seq > expected:
            holes.append((expected, min(seq, last + 1) - 1))
        expected = max(expected, seq + 1)
    return tuple(hole for hole in holes if hole[0] <= hole[1])

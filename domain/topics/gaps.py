"""Seqs the topic fold passed over, read back from the projected log (pure rules, wall clock passed in).

The fold remembers the seq ranges it placed later messages over (`TopicsState.skipped`). A
message in one of them is placed when it comes late; one that never comes (it never reached
the fold: around a rebalance, see docs/topics.md "Passed-over seqs") would stay unplaced.
So once skipped seqs have been outstanding for `timeout_seconds`, the fold asks the recall
stage for them (`GapRead`: the ranges, at most `limit` rows) and places what comes back like a
late message. The stage answers only when the projected log holds the whole ask, or shows the
conversation past it (a seq above the last one asked for); the answer carries `through_seq`,
and everything at or below it is settled: never asked for again (the `cursor`). A seq still
missing then (a dead-lettered message, a producer's hole in its numbering) is given up
(`given_up` counts them; the stage logs each read that had some). Giving up only stops the
asking: the seq stays in `skipped`, so if its message ever does arrive it is still placed.

Idempotent: the cursor only moves forward, a read's answer counts once, and a message read back
twice is placed once (the fold's `never_placed`). Bounded: one read in flight per
conversation, re-asked after the timeout, the attempt numbered (`final` on the last: the stage
then takes what the log holds, without waiting for the projection to get past).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.topics.state import evolve

Range = tuple[int, int]


@dataclass(frozen=True)
class GapConfig:
    timeout_seconds: float = 60.0  # a skipped seq outstanding this long is read back; a read unanswered, re-asked
    max_attempts: int = 3  # the last one is `final`
    limit: int = 100  # rows per read


@dataclass(frozen=True)
class GapRead:
    """Read these seq ranges of the conversation back (at most `limit` rows, in seq order)."""

    ranges: tuple[Range, ...]
    limit: int
    attempt: int
    final: bool

    @property
    def from_seq(self) -> int:
        return self.ranges[0][0]

    @property
    def upto_seq(self) -> int:
        return self.ranges[-1][1]


@dataclass(frozen=True)
class GapRecovery:
    cursor: int = -1  # skipped seqs at or below it were read back (or given up): never asked again
    noticed_at: float = 0.0  # wall clock since when skipped seqs above the cursor are outstanding; 0: none
    asked: Range | None = None  # (from_seq, upto_seq) of the read in flight
    requested_at: float = 0.0
    attempt: int = 0
    given_up: int = 0  # seqs the projected log did not hold once it was past them

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["asked"] = list(self.asked) if self.asked is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> GapRecovery:
        known = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
        if known.get("asked") is not None:
            known["asked"] = (int(known["asked"][0]), int(known["asked"][1]))
        return cls(**known)


def outstanding(skipped: tuple[Range, ...], cursor: int) -> tuple[Range, ...]:
    """The skipped ranges above the cursor (the first one cut at it), in seq order."""
    out = []
    for first, last in sorted(skipped):
        if last > cursor:
            out.append((max(first, cursor + 1), last))
    return tuple(out)


def step(recovery: GapRecovery, skipped: tuple[Range, ...], wall: float,
         config: GapConfig) -> tuple[GapRecovery, GapRead | None]:
    """After every input of the conversation: start timing outstanding seqs, ask for them once
    they are overdue, re-ask a read with no answer; forget the timing once nothing is outstanding."""
    ranges = outstanding(skipped, recovery.cursor)
    if not ranges:
        return (recovery if recovery == GapRecovery(recovery.cursor, given_up=recovery.given_up)
                else GapRecovery(recovery.cursor, given_up=recovery.given_up)), None
    if not recovery.noticed_at:
        return evolve(recovery, noticed_at=wall), None
    if recovery.asked is not None:
        if wall - recovery.requested_at <= config.timeout_seconds:
            return recovery, None
        attempt = recovery.attempt + 1
    elif wall - recovery.noticed_at <= config.timeout_seconds:
        return recovery, None
    else:
        attempt = 1
    read = GapRead(ranges, config.limit, attempt, attempt >= config.max_attempts)
    return evolve(recovery, asked=(read.from_seq, read.upto_seq), requested_at=wall, attempt=attempt), read


def settled(recovery: GapRecovery, from_seq: int, through_seq: int, missing: int, wall: float) -> GapRecovery:
    """A read's answer: every skipped seq up to `through_seq` was sent back or is not in the log.
    Any answer moves the cursor (a stale one vouches for the log as well); only the answer to
    the read in flight ends it and counts its missing seqs (a redelivered answer counts nothing)."""
    recovery = evolve(recovery, cursor=max(recovery.cursor, through_seq))
    if recovery.asked is None or recovery.asked[0] != from_seq:
        return recovery
    # Whatever is still outstanding above the new cursor waits one more timeout from now.
    return evolve(recovery, asked=None, requested_at=0.0, attempt=0, noticed_at=wall,
                   given_up=recovery.given_up + missing)


def due(recovery: GapRecovery, skipped: tuple[Range, ...], wall: float, config: GapConfig) -> bool:
    """A tick would ask (or re-ask) for skipped seqs."""
    if not outstanding(skipped, recovery.cursor):
        return False
    if not recovery.noticed_at:
        return True
    since = recovery.requested_at if recovery.asked is not None else recovery.noticed_at
    return wall - since > config.timeout_seconds


def missing_in(ranges: tuple[Range, ...], through_seq: int, present: int) -> int:
    """How many seqs of `ranges` up to `through_seq` the log did not hold (`present` rows found)."""
    asked = sum(max(0, min(last, through_seq) - first + 1) for first, last in ranges)
    return max(0, asked - present)

"""A memory system as a slice of the conversation processor, and the state record they share.

The processor (streams/processor.py) keeps one table record per conversation. The record is a
small framed map {slice name: that slice's state bytes}; each slice encodes its own state (its
codec may seal it) and the processor re-encodes only the slices an event changed.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.codec import Event
from schemas.envelope import Envelope
from streams.stages import Stage

# (key, raw slice state or None for a conversation the slice has not seen) -> state
Load = Callable[[bytes, bytes | None], Any]
Dump = Callable[[bytes, Any], bytes]  # (key, state) -> raw; may seal with the conversation's keys
# (state, event, wall clock) -> (new state, events to publish on the memory topic); a slice with
# `prepare` gets its inputs as a fourth argument: (state, event, wall clock, inputs).
Fold = Callable[..., tuple[Any, list[Envelope]]]
# Before the fold: False leaves the event out of this slice (the topic fold's erasure race check).
Admit = Callable[[Event, Any], Awaitable[bool]]
# Before the fold, after `admit`: (state, event) -> the inputs its fold needs from outside (an
# effect the fold must not wait a round trip through the log for: the topic fold's message vector).
# Awaited in log order; it waits out an outage of what it calls instead of failing.
Prepare = Callable[[Any, Event], Awaitable[Any]]
# Before a batch of records is folded one by one: (key, state before the batch, event) of every
# record of the batch the slice reads, in log order. It may do ahead, for the whole batch at once,
# what `prepare` would do record by record (one embedding call for every user message fetched),
# and must never be needed: `prepare` stays the authority (what warming missed or failed to get,
# it gets itself), so warming changes the cost, never the fold's inputs.
Warm = Callable[[list[tuple[bytes, Any, Event]]], Awaitable[None]]
# When the processor starts a batch (before `warm`): what a slice asks once a batch is asked
# again (the topic fold's erasure probe: streams/topics_memory/erased.py).
Begin = Callable[[], None]


@dataclass(frozen=True)
class Ticks:
    """A timer of the slice: every `interval_s`, `due(states, now)` gets every conversation's
    (key, state) and returns the (key, tick event) pairs to send; the processor folds them in
    order with everything else (a stuck request is re-issued, a backoff ends)."""

    interval_s: float
    due: Callable[[Iterable[tuple[bytes, Any]], float], list[tuple[bytes, Envelope]]]


@dataclass(frozen=True)
class Slice:
    """One memory system inside the conversation processor."""

    name: str  # its key in the state record; also named in dead letters (`agent.process-conversation.<name>`)
    relevant: frozenset[str]  # the event types its fold reads; others are skipped before any decoding
    load: Load
    dump: Dump
    fold: Fold
    stages: Sequence[Stage] = ()  # its concurrent stages (LLM, embedding), run by streams/stages.py
    ticks: Sequence[Ticks] = ()
    admit: Admit | None = None
    prepare: Prepare | None = None
    warm: Warm | None = None
    begin: Begin | None = None
    # The batch replay (memory_agent/batch_replay) writes the final state of each conversation with
    # the same `dump`, into the same record, under `name`.
    meta: Mapping[str, Any] = field(default_factory=dict)


# --- the state record: b"MSR1" then, per slice, u8 name length, name, u32 state length, state -------

MAGIC = b"MSR1"
_NAME = struct.Struct(">B")
_SIZE = struct.Struct(">I")


class BadRecord(ValueError):
    """Not a state record of the conversation processor."""


def pack(states: Mapping[str, bytes]) -> bytes:
    """The record of `states` (slices in name order, so equal maps give equal bytes)."""
    parts = [MAGIC]
    for name in sorted(states):
        encoded = name.encode()
        parts += [_NAME.pack(len(encoded)), encoded, _SIZE.pack(len(states[name])), states[name]]
    return b"".join(parts)


def unpack(raw: bytes | None) -> dict[str, bytes]:
    """{slice name: state bytes} of a record (empty for None)."""
    if not raw:
        return {}
    if not raw.startswith(MAGIC):
        raise BadRecord(f"a state record starts with {MAGIC!r}, not {bytes(raw[:4])!r}")
    out, at, view = {}, len(MAGIC), memoryview(raw)
    try:
        while at < len(raw):
            (length,) = _NAME.unpack_from(raw, at)
            name = bytes(view[at + 1:at + 1 + length]).decode()
            at += 1 + length
            (size,) = _SIZE.unpack_from(raw, at)
            at += _SIZE.size
            if at + size > len(raw):
                raise BadRecord(f"slice {name!r} runs past the record's end")
            out[name] = bytes(view[at:at + size])
            at += size
    except struct.error as exc:
        raise BadRecord(f"truncated state record: {exc}") from exc
    return out

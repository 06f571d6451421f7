"""Decoding for projectors that read only some event types of a shared topic."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from aiokafka.structs import ConsumerRecord

from schemas.codec import Event, decode, peek_type
from schemas.envelope import InvalidEvent
from schemas.limits import Limits


def events_of(records: Sequence[ConsumerRecord], types: Collection[str], limits: Limits) -> list[Event]:
    """The records' events of `types`, in order. Others are skipped unparsed when their type can
    be peeked; invalid records are skipped too (the topic's main projector dead-letters them)."""
    return [event for _, event in records_of(records, types, limits)]


def records_of(records: Sequence[ConsumerRecord], types: Collection[str],
               limits: Limits) -> list[tuple[ConsumerRecord, Event]]:
    """`events_of`, each event with its record."""
    events = []
    for record in records:
        kind = peek_type(record.value)
        if kind is not None and kind not in types:
            continue
        try:
            event = decode(record.value, key=record.key, limits=limits)
        except InvalidEvent:
            continue
        if event.type in types:
            events.append((record, event))
    return events

"""Decoding for projectors that read only some event types of a shared topic."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from aiokafka.structs import ConsumerRecord

from schemas.codec import Event, decode, peek_type
from schemas.envelope import InvalidEvent
from schemas.limits import Limits


# Recently decoded records, by the identity of their value: the projectors of a group share one
# fetch, so they are handed the very same records, and the memory topic's events were decoded by
# each of them (the memory projector every one, the topics and topic-lineage projectors every
# topic event again: 1-4 % of a stub worker's samples, docs/scaling.md, stub12). Events are immutable;
# an entry holds its bytes, so their id is not reused meanwhile; a record fetched again is a new
# bytes object, decoded anew (as its sealing key stands then).
DECODED_RECORDS = 4096
_decoded: dict[int, tuple[bytes, bytes | None, Limits, Event]] = {}


def decode_record(record: ConsumerRecord, limits: Limits) -> Event:
    """`decode(record.value, key=record.key, limits=limits)`, once for every projector of a group
    that reads the record (raises `InvalidEvent` as it does; a refusal is not kept)."""
    value = record.value
    cached = _decoded.get(id(value))
    if cached is not None and cached[0] is value and cached[1] == record.key and cached[2] == limits:
        return cached[3]
    event = decode(value, key=record.key, limits=limits)
    if len(_decoded) >= DECODED_RECORDS:
        del _decoded[next(iter(_decoded))]  # the oldest
    _decoded[id(value)] = (value, record.key, limits, event)
    return event


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
            event = decode_record(record, limits)
        except InvalidEvent:
            continue
        if event.type in types:
            events.append((record, event))
    return events

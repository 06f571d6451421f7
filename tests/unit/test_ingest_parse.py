"""`memory-agent ingest`'s line parsing (pure): every bad line is an InvalidEvent with a reason,
and a line without an event id gets the same id every time."""

from __future__ import annotations

import json

import pytest

from memory_agent.ingest import derived_event_id, parse_line
from schemas.envelope import InvalidEvent
from schemas.limits import Limits

LINE = {"conversation_id": "c", "user_id": "u", "seq": 3, "role": "user", "content": "I live in Porto."}


def _parse(data: dict | str, tenant: str | None = "t"):
    text = data if isinstance(data, str) else json.dumps(data)
    return parse_line(text.encode(), tenant, Limits(max_content_chars=1000))


def test_plain_line_with_a_string_time_and_a_stable_id() -> None:
    envelope = _parse(LINE | {"occurred_at": "2026-01-01T00:00:00Z"})
    assert envelope.occurred_at.isoformat() == "2026-01-01T00:00:00+00:00"
    assert envelope.event_id == _parse(LINE).event_id == derived_event_id("t", "c", 3, "user", "I live in Porto.")
    assert _parse(LINE | {"content": "I live in Lisbon."}).event_id != envelope.event_id
    assert _parse(LINE | {"event_id": "mine-1"}).event_id == "mine-1"


@pytest.mark.parametrize("field", ["conversation_id", "user_id", "seq", "role", "content"])
def test_a_missing_field_is_named(field: str) -> None:
    with pytest.raises(InvalidEvent, match=f"missing {field}"):
        _parse({k: v for k, v in LINE.items() if k != field})


@pytest.mark.parametrize(("data", "expected"), [
    ("{oops", "not_json"),
    ("[1]", "not_an_object"),
    (LINE | {"content": "x" * 1001}, "content"),
    (LINE | {"occurred_at": "soon"}, "occurred_at"),
    (LINE | {"seq": "3"}, "seq"),
    (LINE | {"contnet": "x"}, "unknown field"),
])
def test_bad_lines_are_refused_with_a_reason(data, expected: str) -> None:
    with pytest.raises(InvalidEvent, match=expected):
        _parse(data)


def test_a_time_without_a_zone_is_utc_like_at_every_other_door() -> None:
    assert _parse(LINE | {"occurred_at": "2026-01-01T09:00:00"}).occurred_at.isoformat() == "2026-01-01T09:00:00+00:00"


def test_tenant_is_required_unless_given() -> None:
    with pytest.raises(InvalidEvent, match="tenant_id"):
        _parse(LINE, tenant=None)
    assert _parse(LINE | {"tenant_id": "other"}, tenant=None).tenant_id == "other"

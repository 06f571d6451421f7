"""Envelope validation, codec round trip, upcasting and JSON Schema export."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from schemas.codec import decode, encode, new_event, validate
from schemas.envelope import InvalidEvent
from schemas.events import MessageAppended, SummaryCompleted
from schemas.export import export_schemas
from schemas.registry import MESSAGE_APPENDED, REGISTRY

FIXTURES = Path(__file__).parent.parent / "fixtures"


def message(**overrides):
    base = {
        "type": "message.appended",
        "schema_version": 2,
        "event_id": "e-1",
        "tenant_id": "acme",
        "conversation_id": "c-1",
        "user_id": "u-1",
        "seq": 0,
        "occurred_at": "2026-11-26T10:00:00Z",
        "payload": {"role": "user", "content": "hello", "metadata": {"lang": "en"}},
    }
    base.update(overrides)
    return base


def test_round_trip_keeps_every_field():
    envelope = new_event(
        MESSAGE_APPENDED,
        MessageAppended(role="assistant", content="héllo ✓", metadata={"k": [1, 2]}),
        tenant_id="acme", conversation_id="c-9", user_id="u-1", subject_id="grandpa",
        seq=41, occurred_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    event = decode(encode(envelope))
    assert event.envelope == envelope
    assert event.payload == MessageAppended(role="assistant", content="héllo ✓", metadata={"k": [1, 2]})
    assert envelope.key == b"acme/c-9"


def test_derived_event_round_trip():
    payload = SummaryCompleted(
        memory_id=2, start_seq=0, end_seq=7, base_memory_id=1, text="s", generation_time_ms=12,
        prompt_version="summary-v1", model="extractive-v1", source_event_ids=["a", "b"],
    )
    envelope = new_event("summary.completed", payload, tenant_id="t", conversation_id="c", user_id="u", seq=7)
    assert decode(encode(envelope)).payload == payload


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"not json at all", "not_json"),
        (b"\xff\xfe{}", "bad_utf8"),
        (b'{"type": "message.appended", "payload": "\xc3\x28"}', "bad_utf8"),
        (b"[1, 2, 3]", "not_an_object"),
        (orjson.dumps(message(type="message.deleted")), "unknown_type"),
        (orjson.dumps(message(schema_version=3)), "unknown_schema_version"),
        (orjson.dumps(message(schema_version="2")), "invalid_field"),
        (orjson.dumps({k: v for k, v in message().items() if k != "user_id"}), "invalid_field"),
        (orjson.dumps(message(seq="5")), "invalid_field"),
        (orjson.dumps(message(seq=-1)), "invalid_field"),
        (orjson.dumps({k: v for k, v in message().items() if k != "seq"}), "invalid_field"),
        (orjson.dumps(message(payload={"role": "robot", "content": "x"})), "invalid_field"),
        (orjson.dumps(message(payload={"role": "user", "content": 5})), "invalid_field"),
        (orjson.dumps(message(conversation_id="a/b")), "invalid_field"),
        (orjson.dumps(message(extra_field=1)), "invalid_field"),
        (orjson.dumps(message(payload={"role": "user", "content": "x" * 40_000})), "content_too_long"),
        (b"{" + b" " * 600_000 + b"}", "oversized"),
    ],
)
def test_invalid_input_has_a_stable_reason(raw, reason):
    with pytest.raises(InvalidEvent) as info:
        decode(raw)
    assert info.value.reason == reason
    assert info.value.detail


def test_frozen_v1_fixture_is_upcast_to_current_version():
    raw = (FIXTURES / "message_appended_v1.json").read_bytes()
    event = decode(raw)
    assert event.envelope.schema_version == REGISTRY[MESSAGE_APPENDED].version == 2
    assert event.payload == MessageAppended(role="user", content="We chose FastAPI and PostgreSQL.", metadata={})
    assert event.envelope.occurred_at == datetime(2026, 2, 14, 10, 15, 30, tzinfo=UTC)
    assert event.envelope.seq == 4
    # Re-encoding writes the current version, which decodes to the same event.
    assert decode(encode(event.envelope)) == event


def test_upcaster_does_not_mutate_its_input():
    data = json.loads((FIXTURES / "message_appended_v1.json").read_text())
    snapshot = json.loads(json.dumps(data))
    validate(data)
    assert data == snapshot


def test_export_writes_a_schema_per_event_type(tmp_path):
    paths = export_schemas(tmp_path)
    assert {p.name for p in paths} == {f"{s.type}.v{s.version}.schema.json" for s in REGISTRY.values()}
    schema = json.loads((tmp_path / "message.appended.v2.schema.json").read_text())
    assert schema["properties"]["type"]["const"] == "message.appended"
    assert "seq" in schema["required"]
    assert schema["properties"]["payload"]["properties"]["role"]["enum"] == ["user", "assistant", "system", "tool"]

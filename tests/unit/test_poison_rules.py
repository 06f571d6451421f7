"""The storable rules (schemas/limits.py), key checks, dead-letter truncation and record isolation."""

from __future__ import annotations

import base64
import hashlib

import orjson
import psycopg
from datetime import UTC, datetime

import pytest
from aiokafka.structs import ConsumerRecord

from runtime.client import MemoryClient
from core.settings import Settings
from runtime.dead_letter import DeadLetter, dead_letter_value, decode_dead_letter
from runtime.isolation import is_record_error, isolate
from schemas import topic_events as te
from schemas.codec import decode, encode, encode_checked, new_event
from schemas.envelope import InvalidEvent, conversation_key, parse_conversation_key
from schemas.limits import PG_INT_MAX, Limits
from tests.support.poison import CASES, message_value, raw_records


def _sdk_event(**changes):
    client = MemoryClient(Settings(environment="test"))
    fields = {"user_id": "u1", "seq": 1, "role": "user", "content": "hi"} | changes
    return client.message_event(tenant_id="tenant-a", conversation_id="victim", **fields)


def test_the_sdk_takes_an_iso_string_time_and_refuses_a_bad_one_with_its_field():
    assert _sdk_event(occurred_at="2026-01-01T00:00:00Z").occurred_at == datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidEvent) as refused:
        _sdk_event(occurred_at="last tuesday")
    assert refused.value.reason == "invalid_field" and "occurred_at" in refused.value.detail


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_sdk_refuses_every_poison_input_with_its_reason(case):
    with pytest.raises(InvalidEvent) as refused:
        _sdk_event(**({"seq": 1} | case.changes))
    assert refused.value.reason == case.sdk_reason
    assert refused.value.detail  # a clear message, not just a code


@pytest.mark.parametrize("name,reason,key,value", raw_records("tenant-a", "victim", 4), ids=lambda v: str(v)[:20])
def test_a_consumer_refuses_every_raw_poison_record_with_its_reason(name, reason, key, value):
    with pytest.raises(InvalidEvent) as refused:
        decode(value, key=key)
    assert refused.value.reason == reason, refused.value


def test_the_largest_storable_values_pass():
    value = message_value("tenant-a", "victim", PG_INT_MAX, {"metadata": {"big": 2**62, "text": "\u00e9\U0001f600"}})
    event = decode(value, key=conversation_key("tenant-a", "victim"))
    assert event.envelope.seq == PG_INT_MAX and event.payload.metadata["big"] == 2**62  # jsonb holds any number
    assert _sdk_event(seq=PG_INT_MAX, metadata={"k": "v" * 60_000}).seq == PG_INT_MAX


def test_payload_integers_of_derived_events_are_checked_too():
    event = new_event(te.TOPIC_MESSAGE_UNASSIGNED, te.TopicMessageUnassigned(seq=2**31, reason="x"),
                      tenant_id="t", conversation_id="c", user_id="u", seq=1)
    with pytest.raises(InvalidEvent, match="payload.seq") as refused:
        decode(encode(event))
    assert refused.value.reason == "out_of_range"
    with pytest.raises(InvalidEvent, match="out_of_range"):
        encode_checked(event)


def test_a_naive_time_is_taken_as_utc():
    value = orjson.loads(message_value("t", "c", 0))
    value["occurred_at"] = "2026-11-26T10:00:00"
    assert decode(orjson.dumps(value)).envelope.occurred_at.utcoffset().total_seconds() == 0


def test_a_dead_letter_that_would_fit_is_checked_at_the_door():
    limits = Limits(max_event_bytes=400_000, max_metadata_bytes=400_000, max_dead_letter_bytes=400_000)
    quotes = new_event("message.appended", _payload('"' * 150_000), tenant_id="t", conversation_id="c",
                       user_id="u", seq=0)
    with pytest.raises(InvalidEvent, match="dead letter") as refused:
        encode_checked(quotes, limits)  # 300 KB of \" that escape to 600 KB in a letter
    assert refused.value.reason == "oversized"


def test_a_number_json_cannot_hold_is_refused_not_crashed_on():
    with pytest.raises(InvalidEvent, match="64-bit") as refused:
        _sdk_event(metadata={"big": 2**80})
    assert refused.value.reason == "invalid_field"


def _payload(blob: str):
    from schemas.events import MessageAppended

    return MessageAppended(role="user", content="x", metadata={"blob": blob})


@pytest.mark.parametrize("key,expected", [
    (b"tenant-a/conv-1", ("tenant-a", "conv-1")), (None, None), (b"no-slash", None), (b"a/b/c", None),
    (b"\xff/x", None), (b"t/" + b"c" * 300, None),
])
def test_a_timer_parses_only_well_formed_keys(key, expected):
    assert parse_conversation_key(key) == expected


def _record(value: bytes | None, key: bytes | None = b"t/c", offset: int = 7) -> ConsumerRecord:
    return ConsumerRecord("topic", 1, offset, 0, 0, key, value, None, len(value or b""), len(key or b""), [])


@pytest.mark.parametrize("value", [b"x" * 2_000_000, b'"\\' * 700_000, bytes(range(256)) * 5000],
                         ids=["plain", "escapes", "binary"])
def test_a_dead_letter_too_large_is_cut_with_a_reference(value):
    limit = 900 * 1024
    letter_bytes = dead_letter_value(DeadLetter(_record(value), "oversized", "d" * 10_000), stage="s", max_bytes=limit)
    assert len(letter_bytes) <= limit
    letter = decode_dead_letter(letter_bytes)
    assert letter["original_truncated"] is True
    assert letter["original_size"] == len(value)
    assert letter["original_sha256"] == hashlib.sha256(value).hexdigest()
    assert letter["source"] == {"topic": "topic", "partition": 1, "offset": 7}
    assert value.startswith(letter["original_bytes"]) and len(letter["original_bytes"]) > limit // 8
    assert len(letter["detail"]) == 2000


def test_a_small_dead_letter_keeps_the_whole_original():
    value = b"\xff\xfe not utf-8"
    letter = decode_dead_letter(dead_letter_value(DeadLetter(_record(value, key=None), "bad_utf8", "d"), stage="s"))
    assert letter["original_bytes"] == value and letter["original_encoding"] == "base64"
    assert letter["original_truncated"] is False and letter["key"] is None
    assert base64.b64decode(letter["original"]) == value


@pytest.mark.asyncio
async def test_isolation_refuses_exactly_the_failing_records_and_applies_the_rest_in_order():
    records = [_record(b"bad" if i in (3, 11, 12) else b"ok", offset=i) for i in range(20)]
    applied: list[int] = []
    refused: list[int] = []

    async def apply_part(part):
        if any(r.value == b"bad" for r in part):
            raise psycopg.errors.NumericValueOutOfRange("integer out of range")  # rolled back: nothing applied
        applied.extend(r.offset for r in part)

    async def refuse(record, error):
        assert isinstance(error, psycopg.errors.NumericValueOutOfRange)
        refused.append(record.offset)

    count = await isolate(records, psycopg.errors.NumericValueOutOfRange("x"), apply_part, refuse)
    assert count == 3 and refused == [3, 11, 12]
    assert applied == [i for i in range(20) if i not in (3, 11, 12)]  # each once, in log order


@pytest.mark.asyncio
async def test_isolation_lets_an_outage_through():
    async def apply_part(part):
        raise psycopg.OperationalError("server closed the connection")

    async def refuse(record, error):
        raise AssertionError("an outage is not the record's fault")

    with pytest.raises(psycopg.OperationalError):
        await isolate([_record(b"a", offset=0), _record(b"b", offset=1)], ValueError("x"), apply_part, refuse)


def test_record_errors_and_infrastructure_errors_are_told_apart():
    assert is_record_error(psycopg.errors.CharacterNotInRepertoire("x"))
    assert is_record_error(psycopg.errors.CheckViolation("x"))
    assert is_record_error(psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"))
    assert is_record_error(ValueError("x"))
    assert not is_record_error(psycopg.OperationalError("x"))
    assert not is_record_error(psycopg.errors.AdminShutdown("x"))
    assert not is_record_error(TimeoutError())
    assert not is_record_error(ConnectionError())


class _Topic:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    async def send(self, *, key, value, headers):
        self.sent.append((key, decode_dead_letter(value), headers))


@pytest.mark.asyncio
async def test_an_agent_dead_letters_what_its_fold_cannot_apply_and_lets_outages_through():
    from types import SimpleNamespace

    from streams.context import StreamContext

    topic = _Topic()
    ctx = StreamContext(Settings(environment="test"), None, None, None, dead_letters=topic)
    stream = SimpleNamespace(current_event=SimpleNamespace(message=_record(b'{"x": 1}', key=b"t/c", offset=42)))
    async with ctx.applying(stream, "fold-things"):
        raise ValueError("this event makes no sense to the fold")
    [(key, letter, headers)] = topic.sent
    assert key == b"t/c" and headers == [("reason", b"apply_failed")]
    assert letter["stage"] == "agent.fold-things" and letter["source"]["offset"] == 42
    assert "makes no sense" in letter["detail"] and letter["original_bytes"] == b'{"x": 1}'
    with pytest.raises(psycopg.OperationalError):
        async with ctx.applying(stream, "fold-things"):
            raise psycopg.OperationalError("the database is down: not the record's fault")
    assert len(topic.sent) == 1


def test_agents_skip_records_whose_key_is_not_their_conversation():
    from streams.context import StreamContext

    ctx = StreamContext(Settings(environment="test"), None, None, None)
    value = message_value("tenant-c", "conv-c", 3)
    assert ctx.decode(value, key=b"tenant-a/conv-alice") is None
    assert ctx.decode(value, key=None) is None
    assert ctx.decode_if(value, frozenset({"message.appended"}), key=b"tenant-a/conv-alice") is None
    assert ctx.decode(value, key=b"tenant-c/conv-c").envelope.seq == 3


def test_scrub_text_drops_only_what_no_consumer_can_store():
    from schemas.limits import scrub_text

    dirty = {"text": "a\u0000b\ud800c", "list": ["x\u0000", 1, 2.5, None], "k\u0000": {"ok": "é😀"}}
    assert scrub_text(dirty) == {"text": "abc", "list": ["x", 1, 2.5, None], "k": {"ok": "é😀"}}

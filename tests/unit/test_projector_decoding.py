"""The projectors of one group are handed the same fetched records: each record is decoded once
for all of them (projections/decoding.py `decode_record`; docs/scaling.md, stub12), and a record
fetched again (new bytes) or refused is decoded again."""

from __future__ import annotations

import pytest
from aiokafka.structs import ConsumerRecord

from projections import decoding
from schemas import topic_events as te
from schemas.codec import encode, new_event
from schemas.envelope import InvalidEvent
from schemas.limits import Limits


def _record(value: bytes, key: bytes = b"acme/c1") -> ConsumerRecord:
    return ConsumerRecord("t", 0, 0, 0, 0, key, value, None, len(key), len(value), [])


def _activated(seq: int) -> bytes:
    return encode(new_event(te.TOPIC_ACTIVATED, te.TopicActivated(topic_id="t1", seq=seq), tenant_id="acme", seq=seq,
                            conversation_id="c1", user_id="u"))


@pytest.fixture
def decoded(monkeypatch) -> list[bytes]:
    calls: list[bytes] = []
    real = decoding.decode
    monkeypatch.setattr(decoding, "decode", lambda value, **kw: calls.append(value) or real(value, **kw))
    return calls


def test_the_projectors_of_a_group_decode_a_record_once(decoded):
    records = [_record(_activated(seq)) for seq in range(3)]
    limits = Limits()
    first = decoding.events_of(records, {te.TOPIC_ACTIVATED}, limits)  # the topics projector
    again = decoding.events_of(records, {te.TOPIC_ACTIVATED}, Limits())  # topic lineage: equal limits
    memory = [decoding.decode_record(record, limits) for record in records]  # the memory projector
    assert [e.payload.seq for e in first] == [0, 1, 2]
    assert again == first and all(a is b for a, b in zip(memory, first, strict=True))
    assert decoded == [r.value for r in records]


def test_a_record_fetched_again_other_limits_or_another_key_are_decoded_anew(decoded):
    value = _activated(7)
    record = _record(value)
    event = decoding.decode_record(record, Limits())
    assert decoding.decode_record(_record(bytes(bytearray(value))), Limits()) == event  # fetched again: new bytes
    decoding.decode_record(record, Limits(max_content_chars=10))
    with pytest.raises(InvalidEvent):  # the key is checked against the event's own conversation
        decoding.decode_record(_record(value, key=b"acme/other"), Limits())
    assert len(decoded) == 4


def test_a_refused_record_is_refused_every_time_and_not_kept(decoded):
    record = _record(b'{"type": "topic.activated", "not json')
    for _ in range(2):
        with pytest.raises(InvalidEvent):
            decoding.decode_record(record, Limits())
    assert len(decoded) == 2 and id(record.value) not in decoding._decoded

"""Facts/chunks event contracts: registered, round-trip through the codec, vectors and seq rules."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import orjson
import pytest
from pydantic import ValidationError

from schemas import facts_events as fe
from schemas.codec import decode, encode, new_event
from schemas.envelope import InvalidEvent
from schemas.export import event_schema
from schemas.registry import REGISTRY
from domain.facts import ids

AT = datetime(2026, 2, 1, 12, 0, tzinfo=UTC)


def vector(values=(0.6, 0.8), model="m"):
    return fe.Vector(model=model, dimensions=len(values), values=list(values))


def recorded(**overrides) -> fe.ChunkRecorded:
    fields = dict(
        chunk_id=ids.chunk_id("t", "c", 0, 20), start_seq=0, end_seq_exclusive=20, owner_user_id="alice",
        subject_id="grandpa", summary="They talked about Lisbon.", embedding=vector(),
        facts=[fe.RecordedFact(fact_id=ids.fact_id("t", "c", 0, 20, "The user lives in Lisbon."), category="other",
                               content="The user lives in Lisbon.", importance=4, tags=["home"],
                               embedding=vector())],
        gate=fe.GateVerdict(worth_remembering=True, reason="first-person statement", method="heuristic"),
        extractor="llm", model="fake-llm", prompt_version="chunk-facts-v1", source_event_ids=["e0", "e1"],
        observed_at=AT, generation_time_ms=12,
    )
    return fe.ChunkRecorded(**(fields | overrides))


def test_every_type_is_registered_once_with_a_stable_name():
    names = [spec.type for spec in fe.SPECS]
    assert len(names) == len(set(names)) == 9
    assert all(REGISTRY[name].payload is spec.payload for name, spec in zip(names, fe.SPECS))
    assert set(fe.MANAGEMENT_TYPES) <= set(names)


def test_chunk_recorded_round_trips_with_its_facts_and_vectors():
    envelope = new_event(fe.CHUNK_RECORDED, recorded(), tenant_id="t", conversation_id="c", user_id="alice", seq=19)
    event = decode(encode(envelope))
    assert event.payload == recorded()
    assert event.payload.facts[0].embedding.values == [0.6, 0.8]
    assert event.payload.observed_at == AT


@pytest.mark.parametrize("event_type, payload", [
    (fe.FACT_DELETED, fe.FactDeleted(fact_id="f1", owner_user_id="alice", content_snapshot="x")),
    (fe.FACT_VISIBILITY_CHANGED, fe.FactVisibilityChanged(fact_id="f1", owner_user_id="alice",
                                                          content_snapshot="x", visibility="shared")),
    (fe.FACT_EDITED, fe.FactEdited(fact_id="f1", owner_user_id="alice", content_snapshot="x", new_content="y",
                                   new_embedding=vector(), snapshot_embedding=vector((1.0, 0.0)))),
])
def test_management_events_travel_without_seq(event_type, payload):
    assert not REGISTRY[event_type].requires_seq
    envelope = new_event(event_type, payload, tenant_id="t", conversation_id="c", user_id="alice")
    event = decode(encode(envelope))
    assert event.envelope.seq is None and event.payload == payload


def test_a_vector_whose_length_is_not_its_dimension_is_refused():
    with pytest.raises(ValidationError, match="2 values for 3 dimensions"):
        fe.Vector(model="m", dimensions=3, values=[0.1, 0.2])
    raw = orjson.loads(encode(new_event(fe.CHUNK_RECORDED, recorded(), tenant_id="t", conversation_id="c",
                                        user_id="alice")))
    raw["payload"]["embedding"]["values"].append(0.0)
    with pytest.raises(InvalidEvent) as caught:
        decode(orjson.dumps(raw))
    assert caught.value.reason == "invalid_field"


def test_visibility_is_private_or_shared_and_importance_is_1_to_5():
    with pytest.raises(ValidationError):
        fe.FactVisibilityChanged(fact_id="f", owner_user_id="a", content_snapshot="x", visibility="public")
    with pytest.raises(ValidationError):
        fe.RecordedFact(fact_id="f", category="other", content="c", importance=6, embedding=vector())


def test_json_schemas_export_for_every_new_type():
    for spec in fe.SPECS:
        schema = event_schema(spec)
        assert schema["properties"]["type"]["const"] == spec.type
        assert "seq" not in schema["required"]


def test_ids_are_deterministic_per_range_and_text_not_position():
    assert ids.fact_id("t", "c", 0, 20, "Lives in  Lisbon.") == ids.fact_id("t", "c", 0, 20, "lives in Lisbon.")
    distinct = {ids.fact_id("t", "c", 0, 20, "a"), ids.fact_id("t", "c", 0, 20, "b"),
                ids.fact_id("t", "c", 20, 40, "a"), ids.fact_id("t2", "c", 0, 20, "a"), ids.chunk_id("t", "c", 0, 20)}
    assert len(distinct) == 5


def test_to_vector_rounds_and_records_model_and_dimension():
    values = np.asarray([0.123456789, -0.5, 0.0], dtype=np.float32)
    v = ids.to_vector(values, "mini")
    assert (v.model, v.dimensions, v.values) == ("mini", 3, [0.1234568, -0.5, 0.0])
    assert ids.vector_literal(v.values) == "[0.1234568,-0.5,0.0]"
    assert ids.from_vector(v).dtype == np.float32


def test_occurred_start_and_fact_relations_are_optional_so_older_events_still_decode():
    envelope = new_event(fe.CHUNK_RECORDED, recorded(), tenant_id="t", conversation_id="c", user_id="alice", seq=19)
    raw = orjson.loads(encode(envelope))
    raw["payload"].pop("occurred_start", None)
    for fact in raw["payload"]["facts"]:
        fact.pop("relation", None)
        fact.pop("target_fact_id", None)
    old = decode(orjson.dumps(raw)).payload
    assert old.occurred_start is None and old.facts[0].relation is None and old.facts[0].target_fact_id is None
    new = recorded(occurred_start=datetime(2026, 1, 31, tzinfo=UTC), facts=[fe.RecordedFact(
        fact_id="f", category="other", content="x", embedding=vector(), relation="contradicts", target_fact_id="g")])
    again = decode(encode(new_event(fe.CHUNK_RECORDED, new, tenant_id="t", conversation_id="c", user_id="alice",
                                    seq=19))).payload
    assert again.occurred_start == datetime(2026, 1, 31, tzinfo=UTC) and again.facts[0].relation == "contradicts"
    with pytest.raises(ValidationError):
        fe.RecordedFact(fact_id="f", category="other", content="x", embedding=vector(), relation="replaces")

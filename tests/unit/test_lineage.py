"""Pure parts of lineage: ids, versions, the recorded-vs-rebuilt comparison, the served record, the CLI text."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from api.schemas import ContextMessage, ContextOut, SummaryOut, Watermark
from retrieval.request import ContextRequest
from api.served import served_payload
from projections.as_of_queries import Moment
from domain.lineage import differences, split_id, version_of
from memory_agent.cli_lineage import render_lineage, turn_items
from projections.queries import ConversationRow
from schemas.codec import decode, encode_checked, new_event
from schemas.lineage_events import CONTEXT_SERVED, ServedTopic

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


def test_ids_split_at_the_last_colon_and_global_ids_stay_whole():
    assert split_id("message", "team:conv:12") == ("team:conv", "12")
    assert split_id("summary", "c:3") == ("c", "3")
    assert split_id("topic", "c:topic-1") == ("c:topic-1", None)
    assert split_id("fact", "f-1") == ("f-1", None)
    for kind, bad in [("message", "conv"), ("message", "conv:x"), ("summary", ":3"), ("summary", "c:")]:
        with pytest.raises(ValueError):
            split_id(kind, bad)


def test_a_version_is_a_stable_digest_of_the_content():
    assert version_of("a") == version_of("a") != version_of("b")
    assert len(version_of(None)) == 16


RECORDED = {"summary": {"memory_id": 2, "start_seq": 0, "end_seq": 5}, "gap_seqs": [6, 7],
            "retrieved": [{"kind": "fact", "id": "f1", "version": "v1"}, {"kind": "chunk", "id": "c1", "version": "w"}],
            "active_topic": {"topic_id": "t1", "summary_upto_seq": -1, "message_seqs": [6, 7]}}


def test_a_rebuilt_context_equal_to_the_record_has_no_differences():
    assert differences(RECORDED, dict(RECORDED)) == []
    # Retrieval not rebuilt (None): not compared.
    assert differences(RECORDED, RECORDED | {"retrieved": None}) == []


def test_every_kind_of_difference_is_named():
    rebuilt = {"summary": {"memory_id": 1, "start_seq": 0, "end_seq": 3}, "gap_seqs": [4, 5, 6, 7],
               "retrieved": [{"kind": "fact", "id": "f1", "version": "v2"}, {"kind": "fact", "id": "f9", "version": "x"}],
               "active_topic": {"topic_id": "t1", "summary_upto_seq": 5, "message_seqs": [6, 7]}}
    found = differences(RECORDED, rebuilt)
    assert found == [
        "summary: recorded #2 (seqs 0..5), reconstructed #1 (seqs 0..3)",
        "gap: recorded seqs 6..7, reconstructed 4..7",
        "retrieved chunk c1: recorded, did not exist then",
        "retrieved fact f1: recorded version v1, then v2",
        "retrieved fact f9: reconstructed, not recorded",
        "active topic summary_upto_seq: recorded -1, reconstructed 5",
    ]
    assert differences(RECORDED, RECORDED | {"active_topic": None}) == ["active topic: recorded t1, reconstructed None"]


def _request(before_seq=None) -> ContextRequest:
    conversation = ConversationRow(tenant_id="t", conversation_id="c", user_id="u", subject_id=None, last_seq=7,
                                   message_count=8, gap_count=0)
    return ContextRequest(conversation=conversation, user_id="u", subject_id=None, query="where?",
                          before_seq=before_seq, budget_tokens=500, now=NOW)


def test_the_served_record_holds_ids_ranges_versions_and_the_watermark_and_round_trips_the_codec():
    out = ContextOut(
        conversation_id="c", mode="caught_up",
        summary=SummaryOut(memory_id=2, start_seq=0, end_seq=5, text="s", prompt_version="p", model="m"),
        messages=[ContextMessage(seq=s, role="user", content="x", occurred_at=NOW) for s in (6, 7)],
        watermark=Watermark(last_seq=7, summary_end_seq=5, requested_min_seq=None, complete=True, missing_seqs=[]))
    payload = served_payload(_request(), out)
    assert (payload.turn_seq, payload.gap_seqs, payload.summary.memory_id) == (8, [6, 7], 2)
    assert payload.retrieved is None and payload.watermark["last_seq"] == 7 and payload.served_at == NOW
    assert served_payload(_request(before_seq=7), out).turn_seq == 7
    envelope = new_event(CONTEXT_SERVED, payload, tenant_id="t", conversation_id="c", user_id="u")
    assert decode(encode_checked(envelope)).payload == payload
    assert payload.clock is None  # a record without the projection clock: compared by time
    clocked = served_payload(_request(), out, ("g1", 42))
    assert (clocked.clock.generation, clocked.clock.position) == ("g1", 42)
    envelope = new_event(CONTEXT_SERVED, clocked, tenant_id="t", conversation_id="c", user_id="u")
    assert decode(encode_checked(envelope)).payload == clocked


def test_the_served_record_checked_with_its_model_refuses_what_the_whole_walk_refuses():
    """`encode_checked(payload=...)` (the recorder's call) walks the texts only when the bytes can
    hold a NUL and the integers through the model: the same bytes, the same refusals."""
    from schemas.envelope import InvalidEvent

    out = ContextOut(conversation_id="c", mode="raw", summary=None, messages=[],
                     watermark=Watermark(last_seq=7, summary_end_seq=None, requested_min_seq=None, complete=True,
                                         missing_seqs=[]))
    good = served_payload(_request(), out, ("g1", 42))
    bad_text = good.model_copy(update={"query": "where\x00?"})
    bad_topic = good.model_copy(update={"active_topic": ServedTopic(topic_id="t\x00", summary_upto_seq=1)})
    bad_seq = good.model_copy(update={"gap_seqs": [6, 2**31]})
    surrogate = good.model_copy(update={"query": "where\ud800?"})
    false_alarm = good.model_copy(update={"query": "a \\u0000 b"})  # an escaped backslash, not a NUL
    for payload, refused in [(good, None), (false_alarm, None), (bad_text, "invalid_text"),
                             (bad_topic, "invalid_text"), (bad_seq, "out_of_range"), (surrogate, "invalid_field")]:
        envelope = new_event(CONTEXT_SERVED, payload, tenant_id="t", conversation_id="c", user_id="u")
        outcomes = []
        for checked in (lambda: encode_checked(envelope), lambda: encode_checked(envelope, payload=payload)):
            try:
                outcomes.append(checked())
            except InvalidEvent as error:
                outcomes.append(error.reason)
        assert outcomes[0] == outcomes[1], payload
        assert outcomes[0] == refused if refused else decode(outcomes[0]).payload == payload


def test_as_of_compares_clock_positions_and_falls_back_to_times():
    by_position, by_time = Moment(NOW, 42), Moment(NOW)
    assert by_position.before("created_pos", "created_at") == "created_pos <= %(pos)s"
    assert by_time.before("created_pos", "created_at") == "created_at <= %(at)s"
    assert by_position.params(t="x") == {"at": NOW, "pos": 42, "t": "x"}


def test_the_cli_lists_a_turns_items_and_renders_sources_and_what_was_served():
    context = {"summary": {"memory_id": 2}, "retrieved": {"items": [{"kind": "fact", "id": "f1"}]},
               "active_topic": {"topic_id": "c:topic-1"}}
    assert turn_items("c", context) == [("summary", "c:2"), ("fact", "f1"), ("topic", "c:topic-1")]
    answer = {"kind": "fact", "id": "f1", "item": {"version": "new", "excerpt": "now"}, "prompt_version": "p",
              "model": "m", "sources": [{"conversation_id": "c", "seq": 0, "role": "user", "event_id": "e0",
                                         "occurred_at": "2026-05-01T12:00:00+00:00", "excerpt": "I live here"}],
              "via": [{"kind": "chunk", "id": "k", "detail": {"message_range": [0, 4]}}], "derived": [],
              "history": [], "served_in": [], "sources_withheld": 1}
    lines = render_lineage(answer, served={"version": "old", "score": 0.5, "content": "then"})
    assert lines[0] == "fact f1 vnew (prompt p, model m)"
    assert "served vold, score 0.500 (changed since: now the line below): 'then'" in lines[1]
    assert "  via chunk k message_range=[0, 4]" in lines
    assert any("<- message c:0 user 2026-05-01T12:00:00 event e0" in line for line in lines)
    assert "  <- 1 message(s) you may not see" in lines


@pytest.mark.asyncio
async def test_recording_never_waits_nor_fails_the_request_when_kafka_is_unreachable(caplog):
    import asyncio

    from api.served import RECORDED, ServedRecorder
    from core.settings import KafkaSettings, Settings

    recorder = ServedRecorder(Settings(kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1")))
    out = ContextOut(conversation_id="c", mode="raw", summary=None, messages=[],
                     watermark=Watermark(last_seq=7, summary_end_seq=None, requested_min_seq=None, complete=True,
                                         missing_seqs=[]))
    failed = RECORDED.labels(outcome="failed")._value.get()
    recorder.record(_request(), out)  # returns at once: the send runs in a task
    assert len(recorder._tasks) == 1
    await asyncio.wait_for(asyncio.gather(*recorder._tasks), 60)
    assert RECORDED.labels(outcome="failed")._value.get() == failed + 1
    assert "context.served not recorded" in caplog.text
    await recorder.close()

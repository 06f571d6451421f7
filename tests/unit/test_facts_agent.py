"""The chunk fold shell: which events it reads, the events it emits, and when the timer ticks."""

from __future__ import annotations

from datetime import UTC, datetime

from core.settings import FactsSettings, LlmSettings, Settings
from schemas import facts_events as fe
from schemas.codec import Event, decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.facts.agent import chunk_config, fold_event, needs_tick, prompt_and_model, tick_event
from domain.facts.chunking import ChunkState
from tests.unit.test_facts_events import recorded

SETTINGS = Settings(facts=FactsSettings(summarization_threshold=6, batch_size=4, failure_backoff_s=10,
                                        request_timeout_s=60))
CONFIG = chunk_config(SETTINGS)


def message(seq: int) -> Event:
    envelope = new_event(MESSAGE_APPENDED, MessageAppended(role="user", content=f"m{seq}"), tenant_id="t",
                         conversation_id="c", user_id="alice", subject_id="s", seq=seq)
    return decode(encode(envelope))


def event(event_type: str, payload, seq=None) -> Event:
    return decode(encode(new_event(event_type, payload, tenant_id="t", conversation_id="c", user_id="alice",
                                   seq=seq)))


def fold(events, state=None, now=100.0):
    state, emitted = state or ChunkState(), []
    for e in events:
        state, out = fold_event(CONFIG, state, e, now, "chunk-facts-v3", "fake-llm")
        emitted.extend(out)
    return state, emitted


def test_settings_reach_the_fold_config():
    assert (CONFIG.summarization_threshold, CONFIG.batch_size, CONFIG.failure_backoff_s) == (6, 4, 10)
    assert (chunk_config(Settings()).summarization_threshold, chunk_config(Settings()).batch_size) == (30, 20)


def test_the_seventh_message_requests_the_oldest_four_as_a_chunk_event():
    state, emitted = fold([message(s) for s in range(6)])
    assert emitted == []
    state, emitted = fold([message(6)], state)
    (request,) = emitted
    assert request.type == fe.CHUNK_REQUESTED and request.seq == 6 and request.subject_id == "s"
    assert (request.payload["start_seq"], request.payload["end_seq_exclusive"], request.payload["attempt"]) == (0, 4, 1)
    assert (request.payload["prompt_version"], request.payload["model"]) == ("chunk-facts-v3", "fake-llm")


def test_a_recorded_chunk_advances_and_management_events_are_ignored():
    state, _ = fold([message(s) for s in range(7)])
    done = event(fe.CHUNK_RECORDED, recorded(start_seq=0, end_seq_exclusive=4), seq=3)
    deleted = event(fe.FACT_DELETED, fe.FactDeleted(fact_id="f", owner_user_id="alice", content_snapshot="x"))
    after_delete, emitted = fold([deleted], state)
    assert after_delete == state and emitted == []
    state, emitted = fold([done], state)
    assert state.last_summarized_end == 4 and state.in_flight is None and emitted == []


def test_a_failure_backs_off_and_a_tick_after_the_backoff_retries_the_same_range():
    state, _ = fold([message(s) for s in range(7)], now=100.0)
    failed = event(fe.CHUNK_FAILED, fe.ChunkFailed(start_seq=0, end_seq_exclusive=4, attempt=1, error="bad json",
                                                   prompt_version="p", model="m"))
    state, emitted = fold([failed], state, now=101.0)
    assert emitted == [] and state.failed_attempts == 1 and state.not_before == 111.0
    assert not needs_tick(state, 110.0, CONFIG) and needs_tick(state, 111.0, CONFIG)
    tick = decode(encode(tick_event("t", "c")))
    state, emitted = fold([tick], state, now=111.0)
    assert [(e.type, e.payload["start_seq"], e.payload["attempt"]) for e in emitted] == [(fe.CHUNK_REQUESTED, 0, 2)]


def test_a_request_that_never_returns_needs_a_tick_after_the_timeout():
    state, _ = fold([message(s) for s in range(7)], now=100.0)
    assert not needs_tick(state, 160.0, CONFIG) and needs_tick(state, 160.5, CONFIG)


def test_the_last_failed_attempt_skips_the_range():
    settings = Settings(facts=FactsSettings(summarization_threshold=6, batch_size=4, max_attempts=1))
    state, emitted = ChunkState(), []
    for e in [message(s) for s in range(7)] + [event(fe.CHUNK_FAILED, fe.ChunkFailed(
            start_seq=0, end_seq_exclusive=4, attempt=1, error="x", prompt_version="p", model="m"))]:
        state, out = fold_event(chunk_config(settings), state, e, 1.0, "p", "m")
        emitted.extend(out)
    assert [e.type for e in emitted] == [fe.CHUNK_REQUESTED, fe.CHUNK_SKIPPED]
    assert state.last_summarized_end == 4


def test_requests_name_the_offline_rules_when_no_llm_is_configured():
    from streams.facts.extraction import OFFLINE_EXTRACTOR

    assert prompt_and_model(Settings()) == (OFFLINE_EXTRACTOR, OFFLINE_EXTRACTOR)
    online = Settings(llm=LlmSettings(provider="openai", model="big"), facts=FactsSettings(extraction_model="huge"))
    assert prompt_and_model(online) == ("chunk-facts-v3", "huge")


def test_ticks_carry_no_seq_and_decode():
    tick = decode(encode(tick_event("t", "c")))
    assert tick.type == fe.CHUNK_TICKED and tick.envelope.seq is None
    assert datetime.now(UTC) >= tick.envelope.occurred_at

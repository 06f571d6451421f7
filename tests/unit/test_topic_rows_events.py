"""The topic batch's events for its rows (memory_agent/batch_replay/topics.py `projected_events`:
the fold's assignments validated from their JSON form, not decoded again) against what the
projectors decode from the same bytes; and the rows `projections/topic_rows` computes from each.
(The rows against the projectors' statements on PostgreSQL: tests/integration/test_topic_rows.py.)"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from aiokafka.structs import ConsumerRecord

from core.llm.port import ChatMessage
from core.settings import Settings
from memory_agent.batch_replay.topics import TopicsBatch, _Conversation, projected_events
from projections.decoding import records_of
from projections.lineage import _TOPIC_TYPES
from projections.topic_rows import TopicRows
from projections.topics import PROJECTED
from schemas import topic_events as te
from schemas.codec import encode
from schemas.limits import Limits
from tests.unit.test_topics_batch import Embedder, Summarizer, history, settings


def _derived(failing: str | None) -> list:
    """Three conversations folded by the batch (compactions, evictions, activations; with
    `failing`, failed compactions too), their events in publishing order."""

    async def go():
        batch = TopicsBatch(Settings.model_copy(settings()), Embedder(), Summarizer(failing), producer=None,
                            derived=None, states=None)
        conversations = []
        for i in range(3):
            conversation = _Conversation(f"t/c{i}".encode(), "t", f"c{i}")
            for event in history(f"c{i}", 40 + 5 * i, 7 + i):
                conversation.messages.setdefault(event.envelope.seq, ChatMessage(
                    event.envelope.seq, event.payload.role, event.payload.content))
                conversation.events.append((event, None))
            conversations.append(conversation)
        await batch.derive(conversations)
        return [(c.key, envelope) for c in conversations for envelope in c.out]

    return asyncio.run(go())


def _records(values) -> list[ConsumerRecord]:
    return [ConsumerRecord("derived", 0, offset, -1, 0, key, value, None, len(key), len(value), ())
            for offset, (key, value) in enumerate(values)]


@pytest.mark.parametrize("failing", [None, "n008"])
def test_the_batchs_events_are_the_decoded_ones_and_give_the_same_rows(failing):
    derived = _derived(failing)
    envelopes = [envelope for _, envelope in derived]
    values = [(key, encode(envelope)) for key, envelope in derived]
    limits = Limits.of(Settings())
    decoded = [event for _, event in records_of(_records(values), PROJECTED | _TOPIC_TYPES, limits)]
    fast = projected_events(envelopes, values, limits)
    kinds = {event.type for event in decoded}
    assert {te.TOPIC_MESSAGE_ASSIGNED, te.TOPIC_COMPACTED, te.TOPIC_ACTIVATED, te.TOPIC_CREATED} <= kinds
    assert (te.TOPIC_COMPACTION_FAILED in kinds) == (failing is not None)
    assert [(e.envelope, e.payload) for e in fast] == [(e.envelope, e.payload) for e in decoded]
    rows = TopicRows().apply(decoded).rows()
    assert rows["topic_archives"] and rows["topic_messages"] and rows["topic_compactions"]
    assert TopicRows().apply(fast).rows() == rows


def test_an_invalid_record_is_skipped_as_the_projectors_skip_it():
    """An assignment too big for a record, and another event whose text PostgreSQL refuses (NUL),
    are left out by the projectors' decode: left out here too."""
    derived = _derived(None)
    envelopes = [envelope for _, envelope in derived]
    values = [(key, encode(envelope)) for key, envelope in derived]
    at = next(i for i, e in enumerate(envelopes) if e.type == te.TOPIC_MESSAGE_ASSIGNED)
    compacted = next(i for i, e in enumerate(envelopes) if e.type == te.TOPIC_COMPACTED)
    envelopes[compacted] = envelopes[compacted].model_copy(update={"payload": envelopes[compacted].payload | {
        "summary": "a NUL \x00 in it"}})
    values[compacted] = (values[compacted][0], encode(envelopes[compacted]))
    limits = replace(Limits.of(Settings()), max_event_bytes=len(values[at][1]) - 1)
    decoded = [event for _, event in records_of(_records(values), PROJECTED | _TOPIC_TYPES, limits)]
    fast = projected_events(envelopes, values, limits)
    assert len(decoded) < sum(e.type in PROJECTED | _TOPIC_TYPES for e in envelopes) - 1
    assert [(e.envelope, e.payload) for e in fast] == [(e.envelope, e.payload) for e in decoded]

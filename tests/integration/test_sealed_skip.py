"""Derived events sealed with a destroyed key, on real Kafka and PostgreSQL (docs/lineage.md,
crypto-shredding): the projectors of the memory topic, the context-served topic and the
conversation log skip them — no row, no error, no dead letter — and apply the others."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaProducer

from domain.lineage import served_topic
from core import privacy
from schemas import facts_events as fe
from schemas.codec import encode, new_event
from schemas.events import SummaryCompleted, SummaryRequested
from schemas.lineage_events import CONTEXT_SERVED, ContextServed
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_REQUESTED
from tests.integration.conftest import running_projectors, sealed_variant, wait_until
from tests.integration.test_backbone import read_dead_letters
from tests.integration.test_facts_capture import rows

TENANT = f"tenant-s{uuid.uuid4().hex[:8]}"


def summary_events(user: str, conversation: str) -> list:
    ids = dict(tenant_id=TENANT, conversation_id=conversation, user_id=user, seq=3)
    return [new_event(SUMMARY_REQUESTED, SummaryRequested(memory_id=1, start_seq=0, end_seq=3, prompt_version="p",
                                                          model="m"), **ids),
            new_event(SUMMARY_COMPLETED, SummaryCompleted(memory_id=1, start_seq=0, end_seq=3, text=f"{user} said things",
                                                          generation_time_ms=1, prompt_version="p", model="m"), **ids)]


def served(user: str, conversation: str):
    payload = ContextServed(turn_seq=4, query=f"what did {user} say", budget_tokens=500, mode="raw",
                            served_at=datetime.now(UTC))
    return new_event(CONTEXT_SERVED, payload, tenant_id=TENANT, conversation_id=conversation, user_id=user)


def edited(user: str):
    vector = fe.Vector(model="v", dimensions=2, values=[0.6, 0.8])
    payload = fe.FactEdited(fact_id=f"fact-{user}", owner_user_id=user, content_snapshot=f"{user} likes tea",
                            new_content=f"{user} likes coffee", new_embedding=vector)
    return new_event(fe.FACT_EDITED, payload, tenant_id=TENANT, conversation_id=f"memories-{user}", user_id=user)


@pytest.mark.asyncio
async def test_events_sealed_with_a_destroyed_key_are_skipped_without_a_dead_letter(settings):
    settings = sealed_variant(settings, True)
    gone, kept = f"gone-{uuid.uuid4().hex[:6]}", f"kept-{uuid.uuid4().hex[:6]}"
    memory = settings.kafka.memory_topic(settings.generation)
    records = [(memory, e) for user in (gone, kept) for e in summary_events(user, f"conv-{user}")]
    records += [(served_topic(settings), served(user, f"conv-{user}")) for user in (gone, kept)]
    records += [(settings.kafka.conversation_topic, edited(user)) for user in (gone, kept)]
    values = [(topic, e.key, encode(e)) for topic, e in records]  # sealed now, with both keys live
    assert all(b"said things" not in v and b"likes" not in v and b"what did" not in v for _, _, v in values)
    assert privacy.key_store(settings).destroy(TENANT, gone)

    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await producer.start()
    try:
        for topic, key, value in values:
            await producer.send_and_wait(topic, value=value, key=key)
        await producer.send_and_wait(memory, value=b"not json", key=f"{TENANT}/conv-{kept}".encode())  # control
    finally:
        await producer.stop()
    async with running_projectors(settings):
        async def applied() -> bool:
            summaries = await rows(settings, "SELECT 1 FROM memory WHERE status = 'completed'")
            contexts = await rows(settings, "SELECT 1 FROM served_contexts")
            return bool(summaries and contexts)
        await wait_until(applied, 90, "the live user's summary and served context projected")
        letters = await read_dead_letters(settings, 1)
    assert [letter["reason"] for letter in letters] == ["not_json"]  # the erased ones left none
    assert await rows(settings, "SELECT conversation_id, memory_text FROM memory WHERE status = 'completed'") == [
        (f"conv-{kept}", f"{kept} said things")]
    assert await rows(settings, "SELECT user_id, payload->>'query' FROM served_contexts") == [(kept, f"what did {kept} say")]
    assert await rows(settings, "SELECT count(*) FROM projection_anomalies") == [(0,)]

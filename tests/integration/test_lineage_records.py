"""The context.served record path on real Kafka and PostgreSQL: projected once however often it
is delivered, a bad record on its topic dead-lettered by reason, the others applied."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaProducer

from domain.lineage import served_topic
from schemas.codec import encode, new_event
from schemas.lineage_events import CONTEXT_SERVED, ContextServed, ServedItem
from tests.integration.conftest import running_projectors, wait_until
from tests.integration.test_backbone import read_dead_letters
from tests.integration.test_facts_capture import rows


def served(turn: int) -> bytes:
    payload = ContextServed(turn_seq=turn, budget_tokens=500, mode="raw", gap_seqs=[turn - 2, turn - 1],
                            retrieved=[ServedItem(kind="fact", id="f1", version="0123456789abcdef", score=0.5)],
                            served_at=datetime.now(UTC))
    return encode(new_event(CONTEXT_SERVED, payload, tenant_id="tenant-a", conversation_id="c1", user_id="alice",
                            event_id=f"served-{turn}"))


@pytest.mark.asyncio
async def test_served_records_are_projected_once_and_bad_ones_are_dead_lettered(settings):
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await producer.start()
    try:
        topic, key = served_topic(settings), b"tenant-a/c1"
        for value, k in [(served(3), key), (b"not json", key), (served(3), key), (served(5), b"tenant-a/other"),
                         (served(7), key)]:
            await producer.send_and_wait(topic, value=value, key=k)
    finally:
        await producer.stop()
    async with running_projectors(settings):
        async def projected() -> bool:
            return len(await rows(settings, "SELECT 1 FROM served_contexts")) >= 2
        await wait_until(projected, 90, "served contexts projected")
        letters = await read_dead_letters(settings, 2)
    assert await rows(settings, "SELECT event_id, turn_seq, gap_from_seq, gap_to_seq, user_id FROM served_contexts"
                                " ORDER BY turn_seq") == [("served-3", 3, 1, 2, "alice"), ("served-7", 7, 5, 6, "alice")]
    assert sorted(letter["reason"] for letter in letters) == ["key_mismatch", "not_json"]
    assert {letter["stage"] for letter in letters} == {"projector.lineage-served"}

"""The stage runner on real Kafka: results go back to the conversation's partition, and a
request still in flight holds the committed offset, so a restart re-delivers it."""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from schemas import topic_events as te
from schemas.codec import decode, encode, new_event
from schemas.events import WindowTicked
from schemas.registry import WINDOW_TICKED
from streams.stages import Stage, StageRunner
from tests.integration.conftest import wait_until


def _decode_if(value, types, *, key):
    event = decode(value, key=key)
    return event if event.type in types else None


def _runner(settings, handle) -> StageRunner:
    stage = Stage("test-stage", frozenset({WINDOW_TICKED}), handle, concurrency=4)
    return StageRunner(
        stage, topic=settings.kafka.memory_topic(settings.generation), group_id=f"{settings.kafka.topic_prefix}.stage",
        bootstrap_servers=settings.kafka.bootstrap_servers, decode_if=_decode_if, commit_interval_s=0.2,
    )


async def _committed(settings, tp: TopicPartition) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(f"{settings.kafka.topic_prefix}.stage")
    finally:
        await admin.close()
    return offsets[tp].offset if tp in offsets else -1


async def _stop(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_an_unfinished_request_holds_the_commit_and_comes_back_after_a_restart(settings):
    topic = settings.kafka.memory_topic(settings.generation)
    requests = [new_event(WINDOW_TICKED, WindowTicked(), tenant_id="t", conversation_id="c1", user_id="u",
                          event_id=f"req-{i}") for i in range(10)]
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    await producer.start()
    try:
        sent = [await (await producer.send(topic, key=r.key, value=encode(r))) for r in requests]
    finally:
        await producer.stop()
    tp = TopicPartition(topic, sent[0].partition)
    first_offset = sent[0].offset

    handled_first: list[str] = []
    never = asyncio.Event()

    async def answer_all_but_the_fourth(events):
        out = []
        for event in events:
            if event.envelope.event_id == "req-3":
                await never.wait()
            handled_first.append(event.envelope.event_id)
            out.append(new_event(te.TOPIC_TICKED, te.TopicTicked(), tenant_id="t", conversation_id="c1", user_id="u",
                                 event_id=f"answer-{event.envelope.event_id}"))
        return out

    task = asyncio.create_task(_runner(settings, answer_all_but_the_fourth).run())
    try:
        await wait_until(lambda: _true(len(handled_first) == 9), 60, "nine answered requests")
        await wait_until(lambda: _committed_is(settings, tp, first_offset + 3), 30, "the commit at the stuck request")
        await asyncio.sleep(1.0)  # more commit rounds: it must not move past the unfinished request
        assert await _committed(settings, tp) == first_offset + 3
    finally:
        await _stop(task)  # a crash of the worker: the unfinished request was never answered

    answers = await _answers(settings, topic)
    assert sorted(answers) == sorted(f"answer-req-{i}" for i in range(10) if i != 3)
    assert set(answers.values()) == {tp.partition}, "answers go to the conversation's partition"

    handled_again: list[str] = []

    async def record(events):
        handled_again.extend(e.envelope.event_id for e in events)
        return []

    task = asyncio.create_task(_runner(settings, record).run())
    try:
        await wait_until(lambda: _true("req-3" in handled_again), 60, "the unfinished request re-delivered")
        # The first run's nine answers follow the requests in that partition: the end is 19 on.
        await wait_until(lambda: _committed_is(settings, tp, first_offset + 19), 30, "the commit at the end")
    finally:
        await _stop(task)
    # At least once from the oldest unfinished request on; nothing before it comes back.
    assert sorted(handled_again) == sorted(f"req-{i}" for i in range(3, 10))


async def _true(value: bool) -> bool:
    return value


async def _committed_is(settings, tp: TopicPartition, offset: int) -> bool:
    return await _committed(settings, tp) == offset


async def _answers(settings, topic: str) -> dict[str, int]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka.bootstrap_servers,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        found: dict[str, int] = {}
        for _ in range(20):
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                for record in records:
                    event = decode(record.value)
                    if event.type == te.TOPIC_TICKED:
                        found[event.envelope.event_id] = tp.partition
            if len(found) >= 9:
                break
        return found
    finally:
        await consumer.stop()

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


def _shared_runner(settings, handle_windows, handle_topics, group: str, **kwargs) -> StageRunner:
    """Two stages on one consumer: window ticks one at a time, topic ticks four at once."""
    stages = [Stage("windows", frozenset({WINDOW_TICKED}), handle_windows, concurrency=1),
              Stage("topics", frozenset({te.TOPIC_TICKED}), handle_topics, concurrency=4)]
    return StageRunner(
        stages, topic=settings.kafka.memory_topic(settings.generation), group_id=group,
        bootstrap_servers=settings.kafka.bootstrap_servers, decode_if=_decode_if, commit_interval_s=0.2, **kwargs,
    )


async def _send_interleaved(settings) -> tuple[TopicPartition, int]:
    """w0 t0 w1 t1 w2 t2 on one partition (one conversation); the partition and w0's offset."""
    topic = settings.kafka.memory_topic(settings.generation)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    await producer.start()
    try:
        sent = []
        for i in range(3):
            for kind, payload, name in ((WINDOW_TICKED, WindowTicked(), "w"), (te.TOPIC_TICKED, te.TopicTicked(), "t")):
                event = new_event(kind, payload, tenant_id="t", conversation_id="c1", user_id="u", event_id=f"{name}{i}")
                sent.append(await (await producer.send(topic, key=event.key, value=encode(event))))
    finally:
        await producer.stop()
    return TopicPartition(topic, sent[0].partition), sent[0].offset


async def _committed_in(settings, group: str, tp: TopicPartition) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group, partitions=[tp])
    finally:
        await admin.close()
    return offsets[tp].offset if tp in offsets else -1


async def test_stages_sharing_a_consumer_do_not_wait_for_each_other_and_commit_only_what_all_finished(settings):
    tp, first = await _send_interleaved(settings)
    group = f"{settings.kafka.topic_prefix}.stages"
    never = asyncio.Event()
    windows: list[str] = []
    topics: list[str] = []

    async def stuck_at_w1(events):
        for event in events:
            windows.append(event.envelope.event_id)
            if event.envelope.event_id == "w1":
                await never.wait()
        return []

    async def record_topics(events):
        topics.extend(event.envelope.event_id for event in events)
        return []

    task = asyncio.create_task(_shared_runner(settings, stuck_at_w1, record_topics, group).run())
    try:
        # The window stage's only slot hangs on w1; the topic stage answers everything anyway.
        await wait_until(lambda: _true(sorted(topics) == ["t0", "t1", "t2"]), 60, "every topic tick handled")
        await wait_until(lambda: _committed_is_in(settings, group, tp, first + 2), 30, "commit at w1")
        await asyncio.sleep(1.0)  # more commit rounds: never past the request one stage has not finished
        assert await _committed_in(settings, group, tp) == first + 2
        assert windows == ["w0", "w1"], "w2 waits behind w1 in its own stage, in log order"
    finally:
        await _stop(task)  # a crash: w1 was never finished

    again: list[str] = []

    async def record(events):
        again.extend(event.envelope.event_id for event in events)
        return []

    task = asyncio.create_task(_shared_runner(settings, record, record, group).run())
    try:
        await wait_until(lambda: _committed_is_in(settings, group, tp, first + 6), 60, "the commit at the end")
    finally:
        await _stop(task)
    # From the oldest record some stage had not finished on, for every stage; nothing before it.
    assert sorted(again) == ["t1", "t2", "w1", "w2"]


async def test_the_shared_group_starts_where_every_per_stage_group_was_done(settings):
    tp, first = await _send_interleaved(settings)
    prefix = settings.kafka.topic_prefix
    legacy = {f"{prefix}.stage.windows": first + 4, f"{prefix}.stage.topics": first + 3}
    for group, offset in legacy.items():  # as the per-stage runners (or the batch replay's hand-over) left them
        consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, group_id=group,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.commit({tp: offset})
        finally:
            await consumer.stop()

    seen: list[str] = []

    async def record(events):
        seen.extend(event.envelope.event_id for event in events)
        return []

    group = f"{prefix}.stages"
    task = asyncio.create_task(_shared_runner(settings, record, record, group, legacy_groups=sorted(legacy)).run())
    try:
        await wait_until(lambda: _committed_is_in(settings, group, tp, first + 6), 60, "the commit at the end")
    finally:
        await _stop(task)
    assert sorted(seen) == ["t1", "t2", "w2"]  # from the lower of the two: t1 at first + 3


async def _committed_is_in(settings, group: str, tp: TopicPartition, offset: int) -> bool:
    return await _committed_in(settings, group, tp) == offset

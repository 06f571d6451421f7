"""Projectors that read the same topic share one consumer and still apply every record exactly
once each, from their own stored offsets (projections/runner.py, `ProjectorGroup`)."""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from memory_agent.worker import consumer_groups
from runtime.db import connect
from projections.runner import ProjectorGroup, save_positions
from tests.integration.conftest import wait_until


class Recording:
    """Applies nothing but notes what it was given, inside the batch's transaction."""

    def __init__(self, name: str, topic: str) -> None:
        self.name, self.topic = name, topic
        self.applied: list[tuple[int, int]] = []

    def topics(self, settings) -> list[str]:
        return [self.topic]

    async def apply(self, conn, records):
        self.applied.extend((r.partition, r.offset) for r in records)
        return []


async def _produce(settings, topic: str, count: int) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    await producer.start()
    try:
        sent = [await (await producer.send(topic, key=f"k{i % 5}".encode(), value=b"x")) for i in range(count)]
    finally:
        await producer.stop()
    return sorted((meta.partition, meta.offset) for meta in sent)


async def _run(group: ProjectorGroup, done) -> None:
    task = asyncio.create_task(group.run())
    try:
        await wait_until(done, 60, "every projector caught up")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _committed(settings, group: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group, partitions=tps)
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in offsets.items()}


async def _true(value: bool) -> bool:
    return value


async def test_projectors_sharing_a_consumer_each_apply_every_record_once_from_their_own_offsets(settings):
    topic = settings.kafka.conversation_topic
    first = await _produce(settings, topic, 40)
    ahead, behind = Recording("test-ahead", topic), Recording("test-behind", topic)
    # Their stored offsets: `ahead` has applied half of every partition, `behind` a quarter.
    by_partition: dict[int, list[int]] = {}
    for partition, offset in first:
        by_partition.setdefault(partition, []).append(offset)
    stored = {name: {TopicPartition(topic, p): offsets[len(offsets) // share] for p, offsets in by_partition.items()}
              for name, share in ((ahead.name, 2), (behind.name, 4))}
    async with await connect(settings) as conn:
        async with conn.transaction():
            for name, positions in stored.items():
                await save_positions(conn, name, positions)
    expected = {name: [(p, o) for p, o in first if o >= positions[TopicPartition(topic, p)]]
                for name, positions in stored.items()}

    group = ProjectorGroup(settings, [ahead, behind])
    assert group.group_id.endswith(".projectors.test-ahead+test-behind")
    ends = {TopicPartition(topic, p): max(offsets) + 1 for p, offsets in by_partition.items()}

    async def caught_up() -> bool:  # and its Kafka-side commit (lag monitoring) at the end too
        return (len(behind.applied) >= len(expected[behind.name]) and len(ahead.applied) >= len(expected[ahead.name])
                and await _committed(settings, group.group_id, list(ends)) == ends)
    await _run(group, caught_up)
    await asyncio.sleep(0.5)
    assert sorted(behind.applied) == expected[behind.name]  # read from the lower of the two positions
    assert sorted(ahead.applied) == expected[ahead.name]  # what it applied already is skipped

    # A restart resumes each from what it stored: new records only, once each.
    second = await _produce(settings, topic, 20)
    ahead.applied.clear()
    behind.applied.clear()
    group = ProjectorGroup(settings, [ahead, behind])
    await _run(group, lambda: _true(len(behind.applied) >= len(second) and len(ahead.applied) >= len(second)))
    await asyncio.sleep(0.5)
    assert sorted(behind.applied) == second and sorted(ahead.applied) == second


def test_the_worker_shares_a_consumer_between_projectors_of_the_same_topics_but_not_with_the_message_index_or_erasures(
        settings):
    from memory_agent.worker import projectors

    chosen = projectors(settings.model_copy(update={"systems": ("window", "facts", "topics")}))
    names = sorted(sorted(p.name for p in group) for group in consumer_groups(settings, chosen))
    assert ["message_index"] in names or not any(p.name == "message_index" for p in chosen)
    assert ["erasure"] in names  # the messages projector never waits for an erasure (docs/security.md)
    assert any("messages" in group for group in names)
    # every lingering projector (derived events, facts, the served-context lineage) on one consumer
    assert ["facts", "lineage-served", "lineage-topics", "memory", "topics"] in names
    assert len(names) == 4


async def test_a_group_over_several_topics_hands_each_projector_its_own_from_its_stored_offsets(settings):
    """The lingering projectors' group (projections/catalog.py) reads topics not all of them read.
    Its Kafka group id is new to a deployment that ran one group per topic set: the positions come
    from PostgreSQL, so each projector resumes where it stood (the upgrade, docs/scaling.md)."""
    from projections.catalog import group_name

    log, derived = settings.kafka.conversation_topic, settings.kafka.memory_topic(settings.generation)
    on_log, on_derived = await _produce(settings, log, 12), await _produce(settings, derived, 8)
    messages, memory = Recording("test-on-log", log), Recording("test-on-derived", derived)
    stored = {TopicPartition(log, p): o for p, o in on_log[:3]}  # applied before the upgrade: up to these
    async with await connect(settings) as conn:
        async with conn.transaction():
            await save_positions(conn, messages.name, stored)
    expected_log = [(p, o) for p, o in on_log if o >= stored.get(TopicPartition(log, p), 0)]

    group = ProjectorGroup(settings, [messages, memory], group_name=group_name([messages, memory]))
    assert group.group_id.endswith(".projectors.lingering") and group.topics == sorted({log, derived})
    await _run(group, lambda: _true(len(messages.applied) >= len(expected_log) and len(memory.applied) >= 8))
    await asyncio.sleep(0.5)
    assert sorted(messages.applied) == expected_log  # its own topic only, from its stored position
    assert sorted(memory.applied) == on_derived  # no position stored: its topic from the beginning


class Writing:
    """Writes a row per record with the writing transaction's id; refuses (ValueError) a record
    whose value is in `refuse`, as a projector refuses a record its code cannot apply."""

    def __init__(self, name: str, topic: str, refuse: frozenset[bytes] = frozenset()) -> None:
        self.name, self.topic, self.refuse = name, topic, refuse

    def topics(self, settings) -> list[str]:
        return [self.topic]

    async def apply(self, conn, records):
        for r in records:
            if r.value in self.refuse:
                raise ValueError(f"{self.name} refuses {r.value!r}")
            await conn.execute("INSERT INTO group_test_rows (projector, part, off, xid) VALUES (%s, %s, %s,"
                               " txid_current())", (self.name, r.partition, r.offset))
        return []


async def _dead_letters(settings, stage: str) -> int:
    consumer = AIOKafkaConsumer(settings.kafka.dead_letter_topic, bootstrap_servers=settings.kafka.bootstrap_servers,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        found = 0
        for records in (await consumer.getmany(timeout_ms=2000)).values():
            found += sum(stage.encode() in record.value for record in records)
        return found
    finally:
        await consumer.stop()


async def test_a_group_applies_a_batch_in_one_transaction_and_per_projector_when_one_refuses_a_record(settings):
    """Both projectors' rows and offsets of a batch commit in one transaction; when one of them
    refuses a record, nothing of that transaction stays and the batch is applied per projector:
    every record once per projector, the refused one dead-lettered once, both at the log end."""
    topic = settings.kafka.conversation_topic
    async with await connect(settings) as conn:
        await conn.execute("CREATE TABLE group_test_rows (projector text, part int, off bigint, xid bigint)")
        await conn.commit()
    sent = await _produce(settings, topic, 30)
    good, picky = Writing("test-good", topic), Writing("test-picky", topic)
    group = ProjectorGroup(settings, [good, picky])
    ends = {}
    for partition, offset in sent:
        ends[partition] = max(ends.get(partition, 0), offset + 1)

    async def both_at_the_end() -> bool:
        async with await connect(settings) as conn:
            rows = await (await conn.execute(
                "SELECT projector, partition, next_offset FROM projector_offsets WHERE projector LIKE 'test-%'")).fetchall()
        return {(name, p, o) for name, p, o in rows} >= {(n, p, o) for n in (good.name, picky.name)
                                                          for p, o in ends.items()}
    await _run(group, both_at_the_end)
    async with await connect(settings) as conn:
        rows = await (await conn.execute("SELECT projector, part, off, xid FROM group_test_rows")).fetchall()
    for name in (good.name, picky.name):
        assert sorted((p, o) for n, p, o, _ in rows if n == name) == sent  # once each
    by_record = {}
    for name, p, o, xid in rows:
        by_record.setdefault((p, o), {})[name] = xid
    assert all(xids[good.name] == xids[picky.name] for xids in by_record.values())  # one transaction each batch

    # A record `picky` refuses: the shared transaction fails, the batch goes per projector.
    bad = b"refuse me"
    picky.refuse = frozenset({bad})
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    await producer.start()
    try:
        more = [await (await producer.send(topic, key=f"k{i % 5}".encode(), value=bad if i == 7 else b"y"))
                for i in range(15)]
    finally:
        await producer.stop()
    more = sorted((m.partition, m.offset) for m in more)
    for partition, offset in more:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    group = ProjectorGroup(settings, [good, picky])
    await _run(group, both_at_the_end)
    async with await connect(settings) as conn:
        rows = await (await conn.execute("SELECT projector, part, off FROM group_test_rows")).fetchall()
    assert sorted((p, o) for n, p, o in rows if n == good.name) == sorted(sent + more)
    picked = sorted((p, o) for n, p, o in rows if n == picky.name)
    assert len(picked) == len(sent) + len(more) - 1 and set(picked) <= set(sent + more)
    assert await _dead_letters(settings, "projector.test-picky") == 1

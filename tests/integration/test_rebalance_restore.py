"""A rebalance must not restore an older state over the one the worker holds (issue 22).

The race (docs/backbone.md, "Rebalances and the table"): faust folds on while its group
rebalances, and with the in-memory store every rebalance restored every active partition of
`conversation-state` from its changelog's beginning, the worker's own partitions too. A state the
processor wrote while that restore ran was overwritten by the older one the changelog still ended
with at the restore's highwater, and the conversation's next message was folded on it: two
histories of one conversation (tests/integration/test_two_workers.py, under load only).

Here the race's condition is made every time instead of by luck: while worker A holds a
partition, the changelog of that partition is given, as its last record for each conversation, an
*older* state of the conversation (the conversation's first state record again): exactly what the
changelog ends with when the processor writes a newer state during a restore. Then the group
rebalances (a second worker leaves) and A keeps the partition. A restore of the kept partition
would hand A the older state; the next messages are then folded on it and the topic fold places
the passed-over messages a second time (placements > messages, the `placements` counter of the
state goes back in the changelog).
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from runtime.client import MemoryClient
from streams.slice import unpack
from tests.integration.conftest import scalar, wait_until, worker_process
from tests.support.fake_openai import FakeOpenAI

CONVERSATIONS = 8


def changelog_topic(settings) -> str:
    return f"{settings.kafka.topic_prefix}.{settings.generation}.streams-conversation-state-changelog"


async def held_partitions(process, settings) -> set[int]:
    """The conversation topic's partitions the worker's faust member holds (the group as the
    broker describes it; the member is the one the worker's log says it joined as last)."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

    group = f"{settings.kafka.topic_prefix}.{settings.generation}.streams"
    joined = re.findall(rf"Joined group '{re.escape(group)}' \(generation \d+\) with member_id (\S+)",
                        Path(process.log_path).read_text(errors="replace"))
    if not joined:
        return set()
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    for described in response.to_object()["groups"]:
        for member in described["members"]:
            if member["member_id"] == joined[-1] and member["member_assignment"]:
                assignment = ConsumerProtocolMemberAssignment.decode(member["member_assignment"])
                return {tp.partition for tp in assignment.partitions() if tp.topic == settings.kafka.conversation_topic}
    return set()


def assignments(process) -> int:
    return Path(process.log_path).read_text(errors="replace").count("Setting newly assigned partitions")


async def changelog(settings) -> list:
    """Every record of the processor's changelog: (partition, offset, key, value)."""
    consumer = AIOKafkaConsumer(changelog_topic(settings), bootstrap_servers=settings.kafka.bootstrap_servers,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    out = []
    try:
        while batch := await consumer.getmany(timeout_ms=1500):
            for tp, records in batch.items():
                out += [(tp.partition, r.offset, r.key, r.value) for r in records]
    finally:
        await consumer.stop()
    return sorted(out, key=lambda r: (r[0], r[1]))


def placements(value: bytes) -> int | None:
    """The topic slice's `placements` counter of a state record (None when sealed)."""
    raw = unpack(value).get("topics")
    try:
        return (orjson.loads(raw).get("topics") or {}).get("placements") if raw else None
    except orjson.JSONDecodeError:
        return None  # sealed (MEMORY_PRIVACY__ENCRYPT_CONTENT=true)


async def say(client: MemoryClient, seqs: range) -> dict[str, int]:
    """Messages of every conversation; {conversation key: its partition}."""
    partitions = {}
    for seq in seqs:
        for c in range(CONVERSATIONS):
            sent = await client.append_message(
                tenant_id="tenant-a", conversation_id=f"c{c}", user_id="alice", seq=seq,
                role="user" if seq % 2 == 0 else "assistant",
                content=f"{client.settings.kafka.topic_prefix} c{c} m{seq}: {'the garden beds' if seq % 2 == 0 else 'noted'}")
            partitions[f"tenant-a/c{c}"] = sent.partition
    return partitions


@pytest.mark.asyncio
async def test_a_rebalance_keeps_the_state_of_a_partition_the_worker_held(settings):
    with FakeOpenAI() as fake:
        env = fake.env(llm=True) | {"MEMORY_EMBEDDING__PROVIDER": "stub", "MEMORY_TOPICS__EMBEDDING_TIMEOUT_S": "3"}
        async with worker_process(settings, log_name="held-a", extra_env=env | {
                    "MEMORY_STATE_DIR": f"/tmp/memory-agent-test/{settings.generation}-a"}) as a, \
                MemoryClient(settings) as client:
            async def folded(upto: int, count: int):
                async def check() -> bool:
                    return (await scalar(settings, "SELECT count(*) FROM topic_conversations") == CONVERSATIONS
                            and await scalar(settings, "SELECT min(last_seq) FROM topic_conversations") == upto
                            and await scalar(settings, "SELECT count(*) FROM messages") == count)
                return check

            # Seq 0 folded before seqs 1-3 are sent: the processor writes a conversation's state once
            # a batch, so each conversation's first state record is surely older than its last.
            partition_of = await say(client, range(0, 1))
            await wait_until(await folded(0, CONVERSATIONS), 120, f"seq 0 folded (log {a.log_path})")
            await say(client, range(1, 4))
            await wait_until(await folded(3, 4 * CONVERSATIONS), 120, f"seqs 0-3 folded (log {a.log_path})")
            before = assignments(a)
            async with worker_process(settings, log_name="held-b", extra_env=env | {
                        "MEMORY_STATE_DIR": f"/tmp/memory-agent-test/{settings.generation}-b"}) as b:
                # B joins: A keeps some partitions (the group is rebalanced a first time).
                async def shared() -> bool:
                    return (assignments(a) > before and "Worker ready" in Path(b.log_path).read_text(errors="replace")
                            and 0 < len(await held_partitions(a, settings)) < settings.kafka.partitions)
                await wait_until(shared, 120, f"B joined and A kept some partitions (logs {a.log_path}, {b.log_path})")
                kept = await held_partitions(a, settings)
                # The older states, last in the kept partitions' changelog: a conversation's first record again.
                records = await changelog(settings)
                first: dict[bytes, tuple[int, bytes]] = {}
                for partition, _, key, value in records:
                    if partition in kept and value is not None:
                        first.setdefault(key, (partition, value))
                assert first, f"A's partitions {kept} hold no state (log {a.log_path})"
                latest = {key: value for partition, _, key, value in records if key in first and value is not None}
                older = [key for key in first if (placements(first[key][1]) or 0) < (placements(latest[key]) or 0)]
                assert older or settings.privacy.encrypt_content, f"no older state to inject: {sorted(first)}"
                producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
                await producer.start()
                try:
                    injected = {(partition, (await producer.send_and_wait(changelog_topic(settings), value, key=key,
                                                                          partition=partition)).offset)
                                for key, (partition, value) in first.items()}
                finally:
                    await producer.stop()
                before = assignments(a)
            # B left (terminated): the group rebalances again and A keeps `kept` (and takes B's).
            await wait_until(lambda: _true(assignments(a) > before), 60, "A reassigned after B left")
            await say(client, range(4, 8))
            await wait_until(await folded(7, 8 * CONVERSATIONS), 120, f"seqs 4-7 folded (log {a.log_path})")

            # One history per conversation: every message placed once, the state's counter never back.
            conversations_kept = sorted(key for key, partition in partition_of.items() if partition in kept)
            history: dict[bytes, list[int]] = {}
            for partition, offset, key, value in await changelog(settings):
                if (partition, offset) not in injected and value is not None and (count := placements(value)) is not None:
                    history.setdefault(key, []).append(count)
            assert history or settings.privacy.encrypt_content, "no topic state read from the changelog"
            for key, counts in history.items():
                assert counts == sorted(counts), f"{key!r}: placements went back {counts} (kept {conversations_kept})"
            # Every message placed once (a message passed over is read back from the projected log
            # after 3 s and placed late: the count would pass the messages').
            async def placed_once() -> bool:
                return await scalar(settings, "SELECT sum(message_count) FROM topics") == 8 * CONVERSATIONS
            await wait_until(placed_once, 60, f"every message placed once (kept {conversations_kept}; log {a.log_path})")


async def _true(value: bool) -> bool:
    return value

"""The live topic erasure race (docs/lineage.md, "In time order across partitions"): in stream
mode the topic fold places alice's messages (in bob's conversation and in her own, where bob
replied) before her `user.erased` is applied; the erasure lands on another partition and the
projectors reach it before those messages (a projectors process that was down, restarted, with
the log waiting). Before the fix the erasure did not know either conversation: alice's words
stayed in bob's topic rows, and bob's reply in her conversation was kept (a replay, or an erasure
applied after the messages, erases that conversation whole). Now the erasure is applied only
once the messages projector has passed its time on every partition: it knows both
conversations, bob's topics are derived again without her, her conversation goes whole.
Real Kafka, PostgreSQL, HTTP and three `memory-agent worker --role` processes."""

from __future__ import annotations

import contextlib
import uuid

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import murmur2

from core.settings import ApiSettings
from runtime.client import MemoryClient
from schemas.envelope import conversation_key
from schemas.erasure_events import erasure_stream
from tests.integration.conftest import API_KEYS, running_api, sealed_variant, wait_until, worker_process
from tests.integration.test_erasure import residue
from tests.integration.test_facts_capture import rows
from tests.support.topic_reader import topic_residue

pytestmark = pytest.mark.timeout(600)

WORKER_ENV = {"MEMORY_SYSTEMS": '["topics"]', "MEMORY_EMBEDDING__PROVIDER": "stub",
              "MEMORY_TOPICS__EMBEDDING_TIMEOUT_S": "2", "MEMORY_TOPICS__MAX_MESSAGES_PER_TOPIC": "50",
              "MEMORY_TOPICS__SIMILARITY_THRESHOLD": "-1.0"}  # one topic per conversation, never archived


def partition_of(key: bytes, partitions: int) -> int:
    """The partition the producer's default partitioner (murmur2, as Java's) gives `key`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def ids(partitions: int) -> tuple[str, str, str, str]:
    """Tenant, alice and two conversation ids whose partitions come after her erasure's: a
    fetch that returns partitions in order hands the projectors her erasure first."""
    tenant = f"tenant-r{uuid.uuid4().hex[:8]}"
    while True:
        alice = f"alice-{uuid.uuid4().hex[:8]}"
        erasure = partition_of(conversation_key(tenant, erasure_stream(alice)), partitions)
        if erasure < partitions // 2:
            break
    later = (f"conv-{uuid.uuid4().hex[:8]}" for _ in iter(int, 1))
    bobs, hers = (next(c for c in later if partition_of(conversation_key(tenant, c), partitions) > erasure)
                  for _ in range(2))
    return tenant, alice, bobs, hers


@contextlib.asynccontextmanager
async def log_ends(settings):
    """A group-less consumer for the topics' end offsets (one for the whole test)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def caught_up(settings, consumer: AIOKafkaConsumer) -> bool:
    """Every projector of the conversation log and the memory topic has applied every record."""
    topics = [settings.kafka.conversation_topic, settings.kafka.memory_topic(settings.generation)]
    await consumer._client.force_metadata_update()  # noqa: SLF001 - a group-less consumer learns new topics so
    parts = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t) or ()]
    ends = {(tp.topic, tp.partition): end for tp, end in (await consumer.end_offsets(parts)).items() if end}
    stored = await rows(settings, "SELECT projector, topic, partition, next_offset FROM projector_offsets")
    readers: dict[str, set[str]] = {}
    for projector, topic, _, _ in stored:
        readers.setdefault(topic, set()).add(projector)
    positions = {(p, t, n): o for p, t, n, o in stored}
    if not {"messages", "erasure"} <= readers.get(topics[0], set()) or "topics" not in readers.get(topics[1], set()):
        return False
    return all(positions.get((p, t, n), 0) >= end for (t, n), end in ends.items() for p in readers.get(t, ()))


@pytest.mark.asyncio
async def test_an_erasure_the_projectors_reach_first_leaves_no_word_the_fold_placed_earlier(settings):
    tenant, alice, bobs, hers = ids(settings.kafka.partitions)
    bob = f"bob-{uuid.uuid4().hex[:8]}"
    mark = f"zqxrace{uuid.uuid4().hex[:8]}"
    keys = API_KEYS | {"alice-key": {"tenant": tenant, "user": alice}}
    settings = sealed_variant(settings.model_copy(update={
        "api": ApiSettings(api_keys=keys), "embedding": settings.embedding.model_copy(update={"provider": "stub"})}),
        False)
    in_bobs = [(bob, "Hello all, the garden needs planning."), (alice, f"I am {mark}b, the code word."),
               (bob, "Tomatoes first, then the beans."), (bob, "Bye for now.")]
    in_hers = [(alice, f"My own notes: {mark}a is the code word."), (bob, "I read your notes.")]
    state = f"/tmp/memory-agent-test/{settings.generation}"
    env = WORKER_ENV | {"MEMORY_STATE_DIR": f"{state}-agents"}
    async with worker_process(settings, "--role", "agents", log_name="race-agents", extra_env=env) as agents, \
            worker_process(settings, "--role", "stages", log_name="race-stages",
                           extra_env=WORKER_ENV | {"MEMORY_STATE_DIR": f"{state}-stages"}) as stages:
        async with MemoryClient(settings) as client:
            for conversation, lines in ((bobs, in_bobs), (hers, in_hers)):
                for seq, (user, text) in enumerate(lines):
                    await client.append_message(tenant_id=tenant, conversation_id=conversation, user_id=user,
                                                seq=seq, role="user", content=text)

        async def placed_by_the_fold() -> bool:  # her words in the fold's events: it took both messages
            found = [await topic_residue(settings, f"{mark}{c}") for c in "ab"]
            return all(settings.kafka.memory_topic(settings.generation) in f for f in found)

        await wait_until(placed_by_the_fold, 240, f"the fold to place her messages ({agents.log_path})")
        async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
            answer = await http.delete(f"/v1/users/{alice}", headers={"X-API-Key": "alice-key"})
        assert answer.status_code == 202, answer.text

        async with worker_process(settings, "--role", "projectors", log_name="race-projectors",
                                  extra_env=WORKER_ENV | {"MEMORY_STATE_DIR": f"{state}-projectors"}) as projectors, \
                log_ends(settings) as ends:
            logs = f"logs {agents.log_path} {stages.log_path} {projectors.log_path}"

            async def settled() -> bool:
                for process in (agents, stages, projectors):
                    if process.returncode is not None:
                        raise AssertionError(f"a worker exited ({logs})")
                [(erased,)] = await rows(settings, "SELECT count(*) FROM erasures")
                [(unsent,)] = await rows(settings, "SELECT count(*) FROM erasure_rederive WHERE sent_at IS NULL")
                [(bobs_placed,)] = await rows(settings, "SELECT count(*) FROM topic_messages WHERE"
                                                        " conversation_id = %s AND seq <> 1", (bobs,))
                return erased == 1 and unsent == 0 and bobs_placed == 3 and await caught_up(settings, ends)

            await wait_until(settled, 300, f"the erasure applied and every projector caught up ({logs})")
            # Everything the fold derives again from bob's conversation is projected too.
            await wait_until(lambda: caught_up(settings, ends), 120, f"projectors caught up ({logs})")
    assert await residue(settings, mark) == {}
    [(conversations,)] = await rows(settings, "SELECT conversation_ids FROM erasures")
    assert set(conversations) == {bobs, hers}, "the erasure knew both conversations she wrote in"
    assert await rows(settings, "SELECT count(*) FROM messages WHERE conversation_id = %s", (hers,)) == [(0,)]
    assert await rows(settings, "SELECT user_id, seq FROM messages WHERE conversation_id = %s ORDER BY seq",
                      (bobs,)) == [(bob, 0), (bob, 2), (bob, 3)]
    assert await rows(settings, "SELECT seq FROM topic_messages WHERE conversation_id = %s ORDER BY seq",
                      (bobs,)) == [(0,), (2,), (3,)]

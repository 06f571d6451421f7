"""The message race for the topic fold (docs/lineage.md, "Messages reached after the erasure";
docs/topics.md, "Erased messages"): alice is erased before the topic fold reaches messages she
wrote earlier. With sealing off the fold could read her words from the log and put them back in
topic titles, messages, archives and summaries; it applies the messages projector's rule
(domain/erasure.py) instead: none of her words reaches a topic table or a topic event, and bob's
messages around hers are placed. Mirrors test_erasure.py's
test_messages_reached_after_their_erasure_are_not_projected_and_later_ones_are (real Kafka,
PostgreSQL, HTTP and `memory-agent worker`)."""

from __future__ import annotations

import httpx
import psycopg
import pytest

from runtime.client import MemoryClient
from core.settings import ApiSettings
from tests.integration.conftest import running_api, sealed_variant, wait_until, worker_process
from tests.integration.test_erasure import (ADMIN, ALICE, BOB, KEEP, KEYS, MARK, TENANT, erasure_projector_alone,
                                            residue, say)
from tests.integration.test_facts_capture import rows
from tests.integration.test_lineage import until
from tests.support.topic_reader import topic_residue

WORKER_ENV = {"MEMORY_SYSTEMS": '["topics"]', "MEMORY_EMBEDDING__PROVIDER": "stub",
              "MEMORY_TOPICS__EMBEDDING_TIMEOUT_S": "2",
              "MEMORY_TOPICS__MAX_MESSAGES_PER_TOPIC": "3", "MEMORY_TOPICS__RECENT_MESSAGE_KEEP": "1",
              "MEMORY_TOPICS__SIMILARITY_THRESHOLD": "-1.0"}  # one topic per conversation; compactions early


@pytest.mark.asyncio
async def test_messages_erased_before_the_topic_fold_reaches_them_leave_no_word_in_topics(settings):
    settings = sealed_variant(settings.model_copy(update={
        "api": ApiSettings(api_keys=KEYS, admin_keys=[ADMIN]),
        "embedding": settings.embedding.model_copy(update={"provider": "stub"})}), False)
    bob_lines = [(BOB, "Hello all, the garden needs planning."), (ALICE, f"I am {MARK}, the code word."),
                 (BOB, f"Welcome {KEEP}, the beds go south."), (BOB, "Tomatoes first."),
                 (BOB, "Then the beans."), (BOB, "Bye for now.")]
    async with MemoryClient(settings) as client:
        await say(client, ALICE, "conv-a", MARK)  # hers, 12 messages (user and assistant)
        for seq, (user, text) in enumerate(bob_lines):
            await client.append_message(tenant_id=TENANT, conversation_id="conv-b", user_id=user,
                                        seq=seq, role="user", content=text)
    async with erasure_projector_alone(settings), running_api(settings) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            answer = await http.delete(f"/v1/users/{ALICE}", headers={"X-API-Key": "alice-key"})
        assert answer.status_code == 202, answer.text
        erasure = answer.json()["event_id"]
        await until(settings, "SELECT 1 FROM erasures WHERE event_id = %s AND log_offset IS NOT NULL", (erasure,),
                    "the erasure applied")

    async with worker_process(settings, extra_env=WORKER_ENV, log_name="topics-erased-race") as worker:
        async def bob_placed() -> bool:
            if worker.returncode is not None:
                raise AssertionError(f"the worker exited (log {worker.log_path})")
            [(active,)] = await rows(settings, "SELECT count(*) FROM topic_messages WHERE conversation_id = 'conv-b'")
            [(archived,)] = await rows(settings, "SELECT coalesce(sum(message_count), 0) FROM topic_archives"
                                                 " WHERE conversation_id = 'conv-b'")
            [(given_up,)] = await rows(settings, "SELECT count(*) FROM erased_messages"
                                                 " WHERE conversation_id = 'conv-a'")
            return active + archived == len(bob_lines) - 1 and given_up == 12

        await wait_until(bob_placed, 180, f"bob's five messages placed (log {worker.log_path})")
        # The fold's summaries of bob's topic were asked for and written (a compaction ran).
        await until(settings, "SELECT 1 FROM topics WHERE conversation_id = 'conv-b' AND summary IS NOT NULL", (),
                    "bob's topic compacted", worker.log_path)
        assert await rows(settings, "SELECT count(*) FROM topics WHERE conversation_id = 'conv-a'") == [(0,)]
        assert await rows(settings, "SELECT count(*) FROM topic_unassigned") == [(0,)]
    assert await residue(settings, MARK) == {}
    kept = await residue(settings, KEEP)  # bob's words are memory: in his topic (active or archived)
    assert "messages" in kept and any(table.startswith("topic") for table in kept), kept
    in_log = await topic_residue(settings, MARK)
    # Her words are in the conversation log (sealing is off: the log is the source of truth) and
    # nowhere the topic fold writes: no topic event, no fold state.
    assert set(in_log) <= {settings.kafka.conversation_topic}, in_log


@pytest.mark.asyncio
async def test_the_fold_s_erasure_snapshot_is_never_stale(settings):
    """The check keeps the applied erasures in memory (streams/topics_memory/erased.py) and asks
    PostgreSQL only for the table's count per message. An erasure applied by the real erasure
    projector a moment before the fold's next check must decide that check: with the snapshot
    of the first check reused as it was, alice's earlier message would be let through."""
    from aiokafka.structs import ConsumerRecord

    from projections.erasure import ErasureProjector
    from schemas import erasure_events as ee
    from schemas.codec import decode, encode, new_event
    from schemas.envelope import conversation_key
    from schemas.events import MessageAppended
    from schemas.registry import MESSAGE_APPENDED
    from projections.erasure_reads import PostgresErasureReads
    from streams.topics_memory.erased import ErasedCheck

    def message(user: str, seq: int):
        return decode(encode(new_event(MESSAGE_APPENDED, MessageAppended(role="user", content="words"),
                                       tenant_id=TENANT, conversation_id="conv-b", user_id=user, seq=seq)))

    def at(partition: int, offset: int, ms: int):  # a faust message: its timestamp in seconds
        return ConsumerRecord("conversations", partition, offset, ms / 1000.0, 0, None, None, None, 0, 0, [])

    t0 = 1_800_000_000_000
    check = ErasedCheck(PostgresErasureReads(settings))
    try:
        assert await check.erasure_of(message(ALICE, 1), at(1, 10, t0)) is None  # the snapshot: no erasure
        erasure = new_event(ee.USER_ERASED, ee.UserErased(erased_user_id=ALICE), tenant_id=TENANT,
                            conversation_id=ee.erasure_stream(ALICE), user_id=ADMIN)
        record = ConsumerRecord(settings.kafka.conversation_topic, 2, 3, t0 + 1000, 0,
                                conversation_key(TENANT, erasure.conversation_id), encode(erasure), None, 1, 1, [])
        async with await psycopg.AsyncConnection.connect(
                settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
            await ErasureProjector(settings).apply(conn, [record])
            await conn.commit()
        assert await rows(settings, "SELECT count(*) FROM erasures") == [(1,)]
        # The very next checks see it: alice's message written before it is covered, hers after
        # it and bob's are not.
        assert await check.erasure_of(message(ALICE, 1), at(1, 10, t0)) == erasure.event_id
        assert await check.erasure_of(message(ALICE, 7), at(1, 20, t0 + 5000)) is None
        assert await check.erasure_of(message(BOB, 2), at(1, 11, t0)) is None
        assert check.reloads == 2  # read at the first check and once after the erasure, not per message
    finally:
        await check.close()

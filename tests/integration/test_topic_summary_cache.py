"""Topic summaries through the LLM result cache, on real PostgreSQL and a local OpenAI-compatible
server: a second generation's compaction of the same messages makes no LLM call and counts a
hit of kind topic_summary; failed or empty answers are never stored; entries record their
provenance (the erasure finds them by it)."""

from __future__ import annotations

import psycopg
import pytest

from core.llm import provenance
from core.llm.port import ChatMessage
from projections import generations as gens
from projections.topic_reads import PostgresTopicReads
from runtime.db import make_pool
from schemas import topic_events as te
from schemas.codec import decode, encode, new_event
from streams.topics_memory.stage import CompactionStage
from streams.topics_memory.summarize import (
    TOPIC_SUMMARY_KIND,
    CachedTopicSummarizer,
    TopicSummaryCall,
    make_topic_summarizer,
)
from tests.support.fake_openai import FakeOpenAI

SEQS = [4, 5, 6, 7, 8]


async def insert_messages(settings, texts: dict[int, str]) -> None:
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True
    ) as conn:
        for seq, text in texts.items():
            await conn.execute(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, occurred_at,"
                " source_partition, source_offset) VALUES ('tenant-a', 'car', %s, %s, 'alice', %s, %s, now(), 0, %s)",
                (seq, f"e{seq}", "user" if seq % 2 == 0 else "assistant", text, seq))


def compaction_request(title: str, attempt: int = 1):
    payload = te.TopicCompactionRequested(topic_id="car:topic-1", upto_seq=8, seqs=SEQS, previous_summary=None,
                                          title=title, attempt=attempt, prompt_version="topic-summary-v1",
                                          model="fake-llm")
    return decode(encode(new_event(te.TOPIC_COMPACTION_REQUESTED, payload, tenant_id="tenant-a",
                                   conversation_id="car", user_id="alice", seq=8)))


async def handle(stage: CompactionStage, request):
    with provenance.serving([request]):  # as the stage runner does (streams/stages.py)
        return decode(encode(await stage.handle(request)))


async def rows(settings, sql: str, params=()) -> list[tuple]:
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
        return await (await conn.execute(sql, params)).fetchall()


def topic_requests(fake: FakeOpenAI) -> list:
    return [r for r in fake.chat_requests if r.user_content.startswith("Topic:")]


@pytest.mark.asyncio
async def test_a_second_generation_compacts_the_same_messages_from_the_cache_without_an_llm_call(settings):
    unique = settings.kafka.topic_prefix  # the cache is shared by every deployment on the database
    texts = {seq: f"{unique} car message {seq}: the front brakes grind" for seq in SEQS}
    await insert_messages(settings, texts)
    title = f"Car brakes {unique}"
    with FakeOpenAI() as fake:
        first_gen = settings.model_copy(update={"llm": fake.llm_settings()})
        second_gen = first_gen.model_copy(update={"generation": f"{settings.generation}r2"})
        first, second = make_topic_summarizer(first_gen), make_topic_summarizer(second_gen)
        assert isinstance(first, CachedTopicSummarizer) and isinstance(second, CachedTopicSummarizer)
        async with make_pool(settings, schema=settings.pg_schema) as pool:
            stage = CompactionStage(first, PostgresTopicReads(pool), inputs_wait_s=5)
            # A non-retryable failure and an empty answer: failed events as before, nothing stored.
            fake.fail_next(1, status=400)
            failed = await handle(stage, compaction_request(title))
            assert (failed.type, failed.payload.retryable) == (te.TOPIC_COMPACTION_FAILED, False)
            fake.text_responder = lambda request: "   "
            failed = await handle(stage, compaction_request(title, attempt=2))
            assert (failed.type, failed.payload.retryable) == (te.TOPIC_COMPACTION_FAILED, True)
            assert "MalformedOutput" in failed.payload.error and "empty" in failed.payload.error
            fake.text_responder = None
            assert len(topic_requests(fake)) == 2
            assert await rows(settings, "SELECT count(*) FROM public.llm_cache WHERE output::text LIKE %s",
                              (f"%{unique}%",)) == [(0,)]

            # The first generation asks the LLM once and stores the answer.
            done = await handle(stage, compaction_request(title, attempt=3))
            assert done.type == te.TOPIC_COMPACTED and done.payload.summary.startswith("FAKE SUMMARY")
            assert f"[4] user: {texts[4]}" in topic_requests(fake)[-1].user_content
            assert len(topic_requests(fake)) == 3

            # The second generation: the same compaction comes from the cache, no LLM call.
            again = await handle(CompactionStage(second, PostgresTopicReads(pool), inputs_wait_s=5),
                                 compaction_request(title))
            assert again.type == te.TOPIC_COMPACTED
            assert (again.payload.summary, again.payload.model, again.payload.prompt_version) == (
                done.payload.summary, "fake-llm", "topic-summary-v1")
            assert len(topic_requests(fake)) == 3, "the second generation called the LLM"

            # The batch replay's bulk lookup: one query, None where not cached.
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT seq, role, content FROM messages WHERE conversation_id = 'car'"
                                         " ORDER BY seq")
                messages = [ChatMessage(*row) for row in await cur.fetchall()]
            call = TopicSummaryCall(title, None, messages, 8)
            key = second.key(call)
            found = await second.cached_many([call, TopicSummaryCall(title, "another base", messages, 8)])
            assert [s and s.text for s in found] == [done.payload.summary, None]
        await first.aclose()
        await second.aclose()  # flushes the usage counts
    assert len(topic_requests(fake)) == 3

    [(kind, model, prompt_version, output)] = await rows(
        settings, "SELECT kind, model, prompt_version, output FROM public.llm_cache WHERE cache_key = %s", (key,))
    assert (kind, model, prompt_version, output["text"]) == (TOPIC_SUMMARY_KIND, "fake-llm", "topic-summary-v1",
                                                             done.payload.summary)
    # Provenance: the conversation whose requests wrote and used the entry (docs/lineage.md).
    assert await rows(settings, "SELECT tenant_id, conversation_id, user_id FROM public.llm_cache_sources"
                                " WHERE cache_key = %s", (key,)) == [("tenant-a", "car", "alice")]
    # The counts `replay status`, /v1/stats and the dashboard show, per generation and kind.
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        assert gens.cache_usage(conn, settings.kafka.topic_prefix, first_gen.generation) == {
            TOPIC_SUMMARY_KIND: {"hits": 0, "calls": 1}}
        assert gens.cache_usage(conn, settings.kafka.topic_prefix, second_gen.generation) == {
            TOPIC_SUMMARY_KIND: {"hits": 2, "calls": 0}}
        conn.execute("DELETE FROM public.llm_cache_usage WHERE topic_prefix = %s", (settings.kafka.topic_prefix,))


@pytest.mark.asyncio
async def test_a_request_the_read_model_already_has_is_answered_from_it_without_a_model_call(settings):
    """A fold that missed an attempt's answer asks again for the same cutoff: the stage must
    answer it (from the read model, no LLM call), not skip it — a skipped re-ask left the topic
    waiting for an answer that never came (docs/topics.md, "Compaction")."""
    await insert_messages(settings, {seq: f"message {seq} about the car" for seq in SEQS})
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True
    ) as conn:
        await conn.execute(
            "INSERT INTO topics (tenant_id, conversation_id, topic_id, title, first_seq, summary, summary_upto_seq,"
            " summary_model, summary_prompt_version, created_at, last_active_at) VALUES ('tenant-a', 'car',"
            " 'car:topic-1', 'The car', 0, 'S from attempt 1', 8, 'fake-llm', 'topic-summary-v1', now(), now())")
    with FakeOpenAI() as fake:
        async with make_pool(settings, schema=settings.pg_schema) as pool:
            stage = CompactionStage(make_topic_summarizer(settings.model_copy(update={"llm": fake.llm_settings()})),
                                    PostgresTopicReads(pool))
            answer = await handle(stage, compaction_request("The car", attempt=2))
            assert answer.type == te.TOPIC_COMPACTED and answer.payload.summary == "S from attempt 1"
            assert answer.payload.upto_seq == 8 and answer.payload.archived_seqs == SEQS
            assert answer.envelope.seq == 8
            assert topic_requests(fake) == []  # no model call

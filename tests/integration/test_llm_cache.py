"""The LLM result cache in PostgreSQL: same inputs answer from the cache; rejected answers never do."""

from __future__ import annotations


import psycopg
import pytest

from core.llm import provenance
from core.llm.cache import CachedJsonCompleter, CachedSummarizer, LlmCache
from core.llm.provenance import Source
from core.llm.openai_provider import OpenAiLlm
from core.llm.port import ChatMessage
from tests.integration.conftest import scalar, wait_until
from tests.support.fake_openai import FakeOpenAI


def needs_summary(data: dict) -> None:
    if not data.get("summary"):
        raise ValueError("no summary")


@pytest.mark.asyncio
async def test_summaries_and_json_answers_come_from_the_cache_the_second_time(settings):
    cache = LlmCache(settings.postgres.dsn, settings.kafka.topic_prefix, settings.generation)
    unique = settings.kafka.topic_prefix  # the cache is shared by every deployment on the database
    with FakeOpenAI() as fake:
        summarizer = CachedSummarizer(OpenAiLlm.from_settings(fake.llm_settings()), cache)
        messages = [ChatMessage(0, "user", f"{unique}: we chose FastAPI"), ChatMessage(1, "assistant", "Good.")]
        first = await summarizer.summarize_window(None, messages, 0, 1)
        second = await summarizer.summarize_window(None, messages, 0, 1)
        assert first == second and len(fake.chat_requests) == 1
        await summarizer.summarize_window("other base", messages, 0, 1)  # other inputs: a new call
        assert len(fake.chat_requests) == 2

        completer = CachedJsonCompleter(OpenAiLlm.from_settings(fake.llm_settings()), cache)
        variables = {"messages": f"[0] user: {unique} I live in Lisbon"}
        fake.json_response = {"facts": []}  # no summary: the caller rejects it
        with pytest.raises(ValueError):
            await completer.complete_json("chunk-facts-v1", variables, validate=needs_summary)
        fake.json_response = {"summary": "Lives in Lisbon", "facts": []}
        good = await completer.complete_json("chunk-facts-v1", variables, validate=needs_summary)
        again = await completer.complete_json("chunk-facts-v1", variables, validate=needs_summary)
        assert good.data == again.data == {"summary": "Lives in Lisbon", "facts": []}
        assert len(fake.chat_requests) == 4  # the rejected answer was asked again, the good one once
    query = (  # the counts reach PostgreSQL in the background, every flush_interval_s
        "SELECT json_object_agg(kind, json_build_array(hits, calls)) FROM public.llm_cache_usage"
        " WHERE topic_prefix = %s AND generation = %s"
    )
    expected = {"summary": [1, 2], "json": [1, 1]}

    async def flushed() -> bool:
        return await scalar(settings, query, (settings.kafka.topic_prefix, settings.generation)) == expected

    await wait_until(flushed, 30, "the cache usage counts flushed to PostgreSQL")
    await cache.aclose()



@pytest.mark.asyncio
async def test_an_entry_and_its_provenance_are_written_together_or_not_at_all(settings):
    """put is one statement (the cache's pool is in autocommit): a provenance row the database
    refuses leaves no entry behind that an erasure could not find by its sources."""
    cache = LlmCache(settings.postgres.dsn, settings.kafka.topic_prefix, settings.generation)
    unique = settings.kafka.topic_prefix  # the cache is shared by every deployment on the database

    async def put(name: str, *sources: Source) -> None:
        token = provenance._serving.set(sources)  # what `provenance.serving` sets inside a stage
        try:
            await cache.put(f"{unique}-{name}", "summary", "m", "v1", {"text": name})
        finally:
            provenance._serving.reset(token)

    try:
        await put("alone")  # outside a stage: the entry alone
        await put("sourced", Source("t", "c", "u", "e1"))
        with pytest.raises(psycopg.errors.NotNullViolation):
            await put("refused", Source("t", "c", None, "e2"))  # user_id is NOT NULL
        assert await rows(settings, "SELECT cache_key FROM public.llm_cache WHERE cache_key LIKE %s ORDER BY 1",
                          (f"{unique}-%",)) == [(f"{unique}-alone",), (f"{unique}-sourced",)]
        assert await rows(settings, "SELECT cache_key, conversation_id, event_id FROM public.llm_cache_sources"
                                    " WHERE cache_key LIKE %s", (f"{unique}-%",)) == [(f"{unique}-sourced", "c", "e1")]
    finally:
        await rows(settings, "DELETE FROM public.llm_cache_sources WHERE cache_key LIKE %s", (f"{unique}-%",))
        await rows(settings, "DELETE FROM public.llm_cache WHERE cache_key LIKE %s RETURNING 1", (f"{unique}-%",))
        await cache.aclose()


async def rows(settings, sql: str, params=()) -> list[tuple]:
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
        cur = await conn.execute(sql, params)
        return [tuple(row) for row in await cur.fetchall()] if cur.description else []

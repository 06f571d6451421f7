"""Embed a message once: the message index and the topic agent of a real worker share one model call
per text through public.embedding_cache, and a replayed generation embeds nothing new."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter

import numpy as np
import psycopg
import pytest

from core.embeddings.local_onnx import model_name
from core.settings import EmbeddingSettings
from runtime.client import MemoryClient
from runtime.embedding_graph import settings_following_stored
from projections.migrate import migrate
from tests.integration.conftest import scalar, wait_until, worker_process
from tests.support.fake_openai import FakeOpenAI

TOPICS_ONLY = {"MEMORY_SYSTEMS": '["topics"]'}  # message index + topic agent: both embed user messages
TURNS = 6


async def count_reaches(settings, sql: str, expected: int, what: str, log_path: str) -> None:
    async def reached() -> bool:
        return await scalar(settings, sql) == expected

    await wait_until(reached, 180, f"{what} (log {log_path})")


@pytest.mark.asyncio
async def test_two_consumers_one_model_call_and_a_replay_embeds_nothing(settings):
    unique = settings.kafka.topic_prefix  # the cache is shared by every deployment on the database
    texts = {seq: f"{unique} message {seq}: {'question about gardening' if seq % 2 == 0 else 'an answer'}"
             for seq in range(2 * TURNS)}
    indexed = "SELECT count(*) FROM message_embeddings"
    placed = "SELECT coalesce(max(last_seq), -1) FROM topic_conversations"
    with FakeOpenAI() as fake:
        env = fake.env(llm=True, embeddings=True) | TOPICS_ONLY
        async with worker_process(settings, extra_env=env) as worker, MemoryClient(settings) as client:
            for seq, text in texts.items():
                await client.append_message(tenant_id="tenant-a", conversation_id="garden", user_id="alice",
                                            seq=seq, role="user" if seq % 2 == 0 else "assistant", content=text)
            await count_reaches(settings, indexed, len(texts), "every message indexed", worker.log_path)
            await count_reaches(settings, placed, len(texts) - 1, "every message placed in a topic", worker.log_path)
        embedded = Counter(text for r in fake.embedding_requests for text in r.inputs)
        # Both consumers needed every user message; each text reached the model exactly once.
        assert embedded == Counter(texts.values()), embedded
        cached = await scalar(settings, "SELECT count(*) FROM public.embedding_cache WHERE model = 'fake-embedding'"
                                        " AND text_sha256 = ANY(%s)",
                              ([hashlib.sha256(t.encode()).digest() for t in texts.values()],))
        assert cached == len(texts)

        # A replay into a new generation (same log, same model): every vector comes from the cache.
        replay = settings.model_copy(update={"generation": f"{settings.generation}_r"})
        await asyncio.to_thread(migrate, replay)
        before = len(fake.embedding_requests)
        async with worker_process(replay, extra_env=env, log_name="replay") as worker:
            await count_reaches(replay, indexed, len(texts), "the replay indexed every message", worker.log_path)
            await count_reaches(replay, placed, len(texts) - 1, "the replay placed every message", worker.log_path)
        assert len(fake.embedding_requests) == before  # no model call at all


async def test_a_text_an_erasure_removed_is_never_cached_again(settings):
    """A consumer that read a text from the log before its erasure may embed it afterwards: the
    erasure remembers the text's keys, and the cache writes no vector for them."""
    from core.embeddings.cache import EmbeddingStore, text_key
    from projections.erasure import embedding_cache_keys

    erased, kept = f"secret {settings.kafka.topic_prefix}", f"kept {settings.kafka.topic_prefix}"
    store = EmbeddingStore(settings.postgres.dsn, deployment=settings.kafka.topic_prefix)
    try:
        async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
            await conn.execute("INSERT INTO public.erased_text_keys (deployment, text_sha256)"
                               " SELECT %s, unnest(%s::bytea[]) ON CONFLICT DO NOTHING",
                               (settings.kafka.topic_prefix, embedding_cache_keys([erased])))
        keys = [text_key(erased), text_key(kept)]
        await store.put_many("fake-embedding", 4, keys, np.ones((2, 4), dtype=np.float32))
        found = await store.get_many("fake-embedding", 4, keys)
        assert set(found) == {text_key(kept)}
    finally:
        await store.aclose()


def metric(text: str, name: str) -> float:
    """The value of an unlabelled sample in a Prometheus exposition."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


async def test_the_local_model_runs_once_per_worker_and_embeds_each_text_once(settings):
    """The offline model behind the process's embedding queue: the message index and both topic
    stages share one model (one ONNX session), and each message text reaches it once."""
    import httpx

    from tests.integration.conftest import free_port

    unique = settings.kafka.topic_prefix
    texts = [f"{unique} message {seq}: {'my tomatoes need more sun' if seq % 2 == 0 else 'try the south wall'}"
             for seq in range(2 * TURNS)]
    port = free_port()
    env = TOPICS_ONLY | {"MEMORY_EMBEDDING__PROVIDER": "local", "MEMORY_WORKER__METRICS_PORT": str(port)}
    with FakeOpenAI() as fake:  # the LLM of the topic summaries; the embedder is the local model
        async with worker_process(settings, extra_env=fake.env(llm=True) | env) as worker, \
                MemoryClient(settings) as client:
            for seq, text in enumerate(texts):
                await client.append_message(tenant_id="tenant-a", conversation_id="garden", user_id="alice",
                                            seq=seq, role="user" if seq % 2 == 0 else "assistant", content=text)
            await count_reaches(settings, "SELECT count(*) FROM message_embeddings", len(texts),
                                "every message indexed", worker.log_path)
            await count_reaches(settings, "SELECT coalesce(max(last_seq), -1) FROM topic_conversations",
                                len(texts) - 1, "every message placed in a topic", worker.log_path)
            async with httpx.AsyncClient() as http:
                exposed = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    assert metric(exposed, "memory_embedding_models_loaded") == 1
    assert metric(exposed, "memory_embedding_queue_texts_total") == len(texts)
    assert metric(exposed, "memory_embedding_queue_batches_total") >= 1
    model = await scalar(settings, "SELECT DISTINCT embedding_model FROM message_embeddings")
    assert model == model_name(EmbeddingSettings().integer_matmul)  # the default graph, named as its own model
    cached = await scalar(settings, "SELECT array_agg(DISTINCT model) FROM public.embedding_cache WHERE text_sha256"
                                    " = ANY(%s)", ([hashlib.sha256(t.encode()).digest() for t in texts],))
    assert cached == [model]
    # A process configured for the other graph keeps the one of the vectors the generation holds.
    other = settings.model_copy(update={"embedding": settings.embedding.model_copy(
        update={"provider": "local", "integer_matmul": not EmbeddingSettings().integer_matmul})})
    assert (await settings_following_stored(other)).embedding.integer_matmul is EmbeddingSettings().integer_matmul

"""The read path's in-process caches: query embeddings (LRU) and the keyword IDF counts (TTL)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from retrieval.keywords import CommonLexemes
from retrieval.query_cache import CachedQueryEmbedder


class CountingEmbedder:
    model, dimensions = "m", 2

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def embed_query(self, text: str) -> np.ndarray:
        self.calls.append(text)
        return np.array([len(text), 1.0], dtype=np.float32)

    async def embed_documents(self, texts):
        return np.zeros((len(texts), 2), np.float32)

    async def aclose(self) -> None:
        pass


def test_a_query_is_embedded_once_and_the_least_recent_leaves_first() -> None:
    inner = CountingEmbedder()
    cached = CachedQueryEmbedder(inner, size=2)

    async def run() -> None:
        first = await cached.embed_query("a")
        assert np.array_equal(await cached.embed_query("a"), first)
        await cached.embed_query("bb")
        await cached.embed_query("a")  # "a" is now the most recent
        await cached.embed_query("ccc")  # evicts "bb"
        await cached.embed_query("a")
        await cached.embed_query("bb")

    asyncio.run(run())
    assert inner.calls == ["a", "bb", "ccc", "bb"]
    assert (cached.hits, cached.misses) == (3, 4)


class SlowEmbedder(CountingEmbedder):
    """Answers when told to: a query embedding still running when another caller asks."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def embed_query(self, text: str) -> np.ndarray:
        self.calls.append(text)
        await self.go.wait()
        if text == "boom":
            raise RuntimeError("embedder down")
        return np.array([len(text), 1.0], dtype=np.float32)


def test_a_query_being_embedded_is_waited_for_not_embedded_again() -> None:
    inner = SlowEmbedder()
    cached = CachedQueryEmbedder(inner)

    async def run() -> None:
        early = asyncio.ensure_future(cached.embed_query("a"))  # the context's early start
        await asyncio.sleep(0)
        later = asyncio.ensure_future(cached.embed_query("a"))
        await asyncio.sleep(0)
        inner.go.set()
        assert np.array_equal(await early, await later)
        failing = [asyncio.ensure_future(cached.embed_query("boom")) for _ in range(2)]
        for task in failing:  # both callers see the failure
            with pytest.raises(RuntimeError, match="embedder down"):
                await task
        await cached.embed_query("a")

    asyncio.run(run())
    assert inner.calls == ["a", "boom"]
    assert (cached.hits, cached.misses) == (3, 2)


def test_a_vector_still_being_made_when_the_cache_is_cleared_is_not_kept() -> None:
    inner = SlowEmbedder()
    cached = CachedQueryEmbedder(inner)

    async def run() -> None:
        running = asyncio.ensure_future(cached.embed_query("a"))
        await asyncio.sleep(0)
        cached.clear()  # an erasure while the question is being embedded
        inner.go.set()
        await running
        await cached.embed_query("a")

    asyncio.run(run())
    assert inner.calls == ["a", "a"]


def test_a_cached_vector_cannot_be_changed_by_a_caller() -> None:
    cached = CachedQueryEmbedder(CountingEmbedder())
    vector = asyncio.run(cached.embed_query("a"))
    with pytest.raises(ValueError):
        vector[0] = 9.0


def test_document_frequencies_are_kept_per_tenant_until_they_expire() -> None:
    stats = CommonLexemes(0.05, idf_ttl_s=30.0)
    stats.remember("t1", {"port": (3, 100), "lisbon": (1, 100)}, now=10.0)
    assert stats.frequencies("t1", ["port", "lisbon", "porto"], now=39.9) == {"port": (3, 100), "lisbon": (1, 100)}
    assert stats.frequencies("t2", ["port"], now=11.0) == {}
    assert stats.frequencies("t1", ["port"], now=40.0) == {}


def test_no_ttl_keeps_nothing() -> None:
    stats = CommonLexemes(0.05)
    stats.remember("t1", {"port": (3, 100)}, now=0.0)
    assert stats.frequencies("t1", ["port"], now=0.0) == {}


def test_the_api_embeds_a_query_on_one_thread_unless_the_embedding_settings_say_otherwise():
    from core.settings import EmbeddingSettings, RetrievalSettings, Settings
    from retrieval.service import query_embedding_settings

    auto = Settings()
    assert auto.embedding.intra_op_threads == 0
    assert query_embedding_settings(auto).embedding.intra_op_threads == 1
    named = Settings(embedding=EmbeddingSettings(intra_op_threads=2))
    assert query_embedding_settings(named).embedding.intra_op_threads == 2
    off = Settings(retrieval=RetrievalSettings(query_embedding_threads=0))
    assert query_embedding_settings(off).embedding.intra_op_threads == 0


def test_the_api_embeds_queries_with_integer_products_only_when_retrieval_says_so():
    from core.settings import EmbeddingSettings, RetrievalSettings, Settings
    from retrieval.service import query_embedding_settings

    assert query_embedding_settings(Settings()).embedding.integer_matmul is RetrievalSettings().query_integer_matmul
    on = Settings(retrieval=RetrievalSettings(query_integer_matmul=True))
    assert query_embedding_settings(on).embedding.integer_matmul is True
    assert on.embedding.integer_matmul is EmbeddingSettings().integer_matmul  # the documents' settings are untouched
    off = Settings(embedding=EmbeddingSettings(integer_matmul=False), retrieval=RetrievalSettings(query_integer_matmul=False))
    assert query_embedding_settings(off).embedding.integer_matmul is False


def test_the_api_embeds_documents_with_the_workers_graph_when_questions_run_as_integer_products():
    """A stored memory's or an edited fact's vector goes into its event and public.embedding_cache
    under the model's name: it must be the worker's (float) graph's, not the questions' one."""
    from types import SimpleNamespace

    from core.settings import EmbeddingSettings, RetrievalSettings, Settings
    from retrieval.service import document_embedder_for, embedder_for

    def graph(embedder) -> bool:
        while hasattr(embedder, "inner"):  # the caches around the process's queue
            embedder = embedder.inner
        return embedder.provider.integer_matmul  # the queue's model (loaded on its first call)

    floats = EmbeddingSettings(integer_matmul=False)  # a generation whose documents are the float graph's
    on = SimpleNamespace(settings=Settings(embedding=floats, retrieval=RetrievalSettings(query_integer_matmul=True)))
    assert graph(embedder_for(on)) is True
    assert graph(document_embedder_for(on)) is False
    assert document_embedder_for(on) is document_embedder_for(on)  # made once
    off = SimpleNamespace(settings=Settings(embedding=floats, retrieval=RetrievalSettings(query_integer_matmul=False)))
    assert document_embedder_for(off) is embedder_for(off)  # one graph: one embedder

"""CachedEmbedder: the same text reaches the model once; hits and misses keep the caller's order."""

from __future__ import annotations

import numpy as np
import pytest

from core.embeddings import make_embedder
from core.embeddings.cache import CachedEmbedder, text_key
from core.embeddings.stub import StubEmbedder
from core.metrics import EMBEDDING_CACHE
from core.settings import EmbeddingSettings, Settings


class CountingEmbedder(StubEmbedder):
    def __init__(self) -> None:
        super().__init__(dimensions=8)
        self.calls: list[list[str]] = []
        self.queries: list[str] = []

    async def embed_documents(self, texts):
        self.calls.append(list(texts))
        return await super().embed_documents(texts)

    async def embed_query(self, text):
        self.queries.append(text)
        return await super().embed_query(text)


class DictStore:
    """The store's contract (batch get, batch put, first write wins) over a dict."""

    def __init__(self) -> None:
        self.rows: dict[tuple, bytes] = {}
        self.gets = self.puts = 0
        self.fail = False

    async def get_many(self, model, dimensions, keys):
        self.gets += 1
        if self.fail:
            raise OSError("connection refused")
        return {k: np.frombuffer(self.rows[(model, dimensions, k)], dtype="<f4")
                for k in keys if (model, dimensions, k) in self.rows}

    async def put_many(self, model, dimensions, keys, vectors):
        self.puts += 1
        for k, v in zip(keys, vectors):
            self.rows.setdefault((model, dimensions, k), np.asarray(v, dtype="<f4").tobytes())

    async def aclose(self):
        pass


def hits() -> float:
    return EMBEDDING_CACHE.labels("hit")._value.get()


@pytest.mark.asyncio
async def test_second_call_for_the_same_texts_makes_no_model_call():
    model, store = CountingEmbedder(), DictStore()
    first = await CachedEmbedder(model, store).embed_documents(["alpha", "beta"])
    before = hits()
    again = await CachedEmbedder(model, store).embed_documents(["beta", "alpha"])  # another consumer
    assert model.calls == [["alpha", "beta"]]
    assert np.array_equal(again, first[::-1]) and again.dtype == np.float32
    assert hits() - before == 2 and store.gets == 2 and store.puts == 1


@pytest.mark.asyncio
async def test_mixed_batch_embeds_only_the_misses_in_one_call_and_keeps_order():
    model, store = CountingEmbedder(), DictStore()
    embedder = CachedEmbedder(model, store)
    await embedder.embed_documents(["b", "d"])
    texts = ["a", "b", "c", "d", "a", "e"]
    vectors = await embedder.embed_documents(texts)
    assert model.calls[1] == ["a", "c", "e"]  # one call, each missing text once
    expected = await StubEmbedder(dimensions=8).embed_documents(texts)
    assert np.allclose(vectors, expected)


@pytest.mark.asyncio
async def test_the_key_is_the_text_the_model_sees_prefix_included():
    model, store = CountingEmbedder(), DictStore()
    await CachedEmbedder(model, store, document_prefix="passage: ").embed_documents(["x"])
    await CachedEmbedder(model, store, document_prefix="").embed_documents(["x"])
    assert len(model.calls) == 2
    assert {k[2] for k in store.rows} == {text_key("passage: x"), text_key("x")}


@pytest.mark.asyncio
async def test_a_failing_store_falls_back_to_the_model_and_is_skipped_for_a_while():
    model, store = CountingEmbedder(), DictStore()
    store.fail = True
    embedder = CachedEmbedder(model, store, retry_after_s=60)
    first = await embedder.embed_documents(["a", "b"])
    second = await embedder.embed_documents(["a"])
    assert first.shape == (2, 8) and np.array_equal(second[0], first[0])
    assert store.gets == 1 and len(model.calls) == 2  # not asked again while marked down


@pytest.mark.asyncio
async def test_queries_never_touch_the_store_and_empty_batches_call_nothing():
    model, store = CountingEmbedder(), DictStore()
    embedder = CachedEmbedder(model, store)
    assert (await embedder.embed_documents([])).shape == (0, 8)
    await embedder.embed_query("q1")
    await embedder.embed_query("q1")  # the API's own LRU (retrieval/query_cache.py) keeps repeats
    assert model.queries == ["q1", "q1"] and store.gets == 0 and model.calls == []


def test_factory_wraps_every_provider_and_the_setting_turns_the_store_off():
    on = make_embedder(Settings(embedding=EmbeddingSettings(provider="stub", cache_enabled=True)))
    off = make_embedder(Settings(embedding=EmbeddingSettings(provider="stub", cache_enabled=False)))
    assert isinstance(on.inner.provider, StubEmbedder) and on.store is not None and off.store is None
    assert on.model == "stub-shake256" and on.dimensions == 384


@pytest.mark.asyncio
async def test_consumers_embedding_the_same_text_at_once_share_one_model_call():
    import asyncio

    class SlowEmbedder(CountingEmbedder):
        async def embed_documents(self, texts):
            await asyncio.sleep(0.05)  # both consumers miss before either writes back
            return await super().embed_documents(texts)

    model, store = SlowEmbedder(), DictStore()
    index, topics = CachedEmbedder(model, store), CachedEmbedder(model, store)
    a, b = await asyncio.gather(index.embed_documents(["hi", "there"]), topics.embed_documents(["there", "new"]))
    assert sorted(t for call in model.calls for t in call) == ["hi", "new", "there"]
    assert np.array_equal(a[1], b[0])

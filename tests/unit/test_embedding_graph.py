"""The local model's two graphs (float and integer products) are two models: their vectors and cache
rows carry different names, and a generation keeps the graph of the vectors it already stores."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from core.embeddings.cache import CachedEmbedder
from core.embeddings.graph import following_stored, stored_graph
from core.embeddings.local_onnx import (INTEGER_MODEL_NAME, MODEL_NAME, PER_TENSOR_INTEGER_MODEL_NAME,
                                        LocalOnnxEmbedder)
from core.settings import EmbeddingSettings, RetrievalSettings, Settings


class RecordingStore:
    """public.embedding_cache's interface in memory, keyed as the table is: (model, dimensions, key)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int, bytes], np.ndarray] = {}

    async def get_many(self, model, dimensions, keys):
        return {k: self.rows[(model, dimensions, k)] for k in keys if (model, dimensions, k) in self.rows}

    async def put_many(self, model, dimensions, keys, vectors):
        self.rows.update({(model, dimensions, k): v for k, v in zip(keys, vectors)})

    async def aclose(self) -> None:
        return None


async def test_a_text_embedded_by_each_graph_is_two_cache_rows_under_two_names():
    store = RecordingStore()
    text = "Caroline adopted a rescue dog named Biscuit last spring."
    floats = CachedEmbedder(LocalOnnxEmbedder(intra_op_threads=1), store)
    integers = CachedEmbedder(LocalOnnxEmbedder(intra_op_threads=1, integer_matmul=True), store)
    (a,), (b,) = await floats.embed_documents([text]), await integers.embed_documents([text])
    assert (floats.model, integers.model) == (MODEL_NAME, INTEGER_MODEL_NAME)
    assert sorted(model for model, _, _ in store.rows) == [MODEL_NAME, INTEGER_MODEL_NAME]
    assert float(a @ b) < 0.99999  # the integer graph did not get the float row back (nor the reverse)
    (again,) = await integers.embed_documents([text])
    np.testing.assert_array_equal(again, b)  # its own row, from the cache


@pytest.mark.parametrize("setting", [True, False])
def test_a_generation_keeps_the_graph_of_the_vectors_it_stores(setting):
    settings = Settings(embedding=EmbeddingSettings(integer_matmul=setting))
    assert following_stored(settings, [MODEL_NAME, None, MODEL_NAME]).embedding.integer_matmul is False
    assert following_stored(settings, [INTEGER_MODEL_NAME]).embedding.integer_matmul is True
    # the first integer graph's vectors (per tensor, no longer made): the generation stays integer
    assert following_stored(settings, [PER_TENSOR_INTEGER_MODEL_NAME]).embedding.integer_matmul is True
    assert following_stored(settings, []) is settings  # an empty generation: the setting chooses
    assert following_stored(settings, [None, "text-embedding-3-small"]) is settings  # not the local model's
    remote = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"provider": "openai"})})
    assert following_stored(remote, [MODEL_NAME]) is remote


def test_a_generation_mixed_before_the_names_counts_as_float():
    assert stored_graph([INTEGER_MODEL_NAME, MODEL_NAME]) is False
    assert stored_graph([None]) is None


def test_the_apis_documents_follow_the_generations_graph_its_questions_stay_integer():
    """The API's settings follow the generation's stored vectors at start (api/app.py); a stored
    memory's vector is then the worker's graph's, whichever the default."""
    from retrieval.service import document_embedder_for, embedder_for

    def graph(embedder) -> bool:
        while hasattr(embedder, "inner"):  # the caches around the process's queue
            embedder = embedder.inner
        return embedder.provider.integer_matmul

    integer = Settings(embedding=EmbeddingSettings(integer_matmul=True))
    fresh = SimpleNamespace(settings=following_stored(integer, []))  # a generation with no vector yet
    assert document_embedder_for(fresh) is embedder_for(fresh)  # both integer: one embedder
    assert graph(document_embedder_for(fresh)) is True
    upgraded = SimpleNamespace(settings=following_stored(integer, [MODEL_NAME]))  # a float generation
    assert graph(document_embedder_for(upgraded)) is False
    assert graph(embedder_for(upgraded)) is RetrievalSettings().query_integer_matmul

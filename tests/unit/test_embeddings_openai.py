"""OpenAiEmbedder against a real local server speaking the OpenAI embeddings API."""

from __future__ import annotations

import numpy as np
import pytest

from core.embeddings import (
    EmbeddingError,
    OpenAiEmbedder,
    make_embedder,
    prefixes_for,
)
from core.settings import Settings
from tests.support.fake_openai import FakeOpenAI, fake_openai, hashed_embedding  # noqa: F401


def make(fake: FakeOpenAI, **overrides) -> OpenAiEmbedder:
    return OpenAiEmbedder.from_settings(fake.embedding_settings(**overrides))


async def test_vectors_have_shape_dtype_norm_and_order(fake_openai):
    embedder = make(fake_openai, batch_size=2)
    texts = ["WiFi problem", "router issue", "apple pie", "pie", "cat"]
    vectors = await embedder.embed_documents(texts)
    assert vectors.shape == (5, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    expected = np.array([hashed_embedding(t, 384) for t in texts], dtype=np.float32)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    # batches go out concurrently, so compare them in any arrival order
    sent = sorted(r.inputs for r in fake_openai.embedding_requests)
    assert sent == sorted([texts[0:2], texts[2:4], texts[4:]])
    assert (embedder.model, embedder.dimensions) == ("fake-embedding", 384)


async def test_nomic_model_gets_search_prefixes(fake_openai):
    embedder = make(fake_openai, model="nomic-embed-text:latest", dimensions=384)
    await embedder.embed_documents(["The user owns a cat."])
    await embedder.embed_query("pets?")
    documents, queries = fake_openai.embedding_requests
    assert documents.inputs == ["search_document: The user owns a cat."]
    assert queries.inputs == ["search_query: pets?"]
    assert "dimensions" not in documents.body  # nomic does not take a dimensions parameter


async def test_minilm_gets_no_prefix_and_settings_override_known_ones(fake_openai):
    await make(fake_openai, model="all-MiniLM-L6-v2").embed_query("pets?")
    await make(fake_openai, model="nomic-embed-text", query_prefix="").embed_query("pets?")
    await make(fake_openai, query_prefix="Q: ").embed_query("pets?")
    assert [r.inputs for r in fake_openai.embedding_requests] == [["pets?"], ["pets?"], ["Q: pets?"]]


async def test_dimensions_are_sent_for_text_embedding_3_and_recorded(fake_openai):
    embedder = make(fake_openai, model="text-embedding-3-small", dimensions=256)
    vector = await embedder.embed_query("hello")
    assert fake_openai.embedding_requests[0].body["dimensions"] == 256
    assert vector.shape == (256,) and embedder.dimensions == 256


async def test_vectors_of_the_wrong_size_are_refused(fake_openai):
    with pytest.raises(EmbeddingError) as caught:
        await make(fake_openai, dimensions=768).embed_query("hello")  # server answers 384
    assert caught.value.retryable is False


@pytest.mark.parametrize("kind", ["wrong_count", "wrong_dimensions"])
async def test_malformed_answers_are_refused(fake_openai, kind):
    fake_openai.malformed_next(1, kind)
    with pytest.raises(EmbeddingError):
        await make(fake_openai).embed_documents(["a", "b"])


async def test_server_errors_are_retried(fake_openai):
    fake_openai.fail_next(2, status=500, endpoint="embeddings")
    embedder = OpenAiEmbedder(model="fake-embedding", dimensions=384, base_url=fake_openai.base_url,
                              max_retries=2, backoff_base_s=0.01, backoff_max_s=0.05)
    vector = await embedder.embed_query("hello")
    assert vector.shape == (384,)
    assert len(fake_openai.embedding_requests) == 3


async def test_empty_text_is_sent_as_a_space(fake_openai):
    await make(fake_openai).embed_documents(["", "x"])
    assert fake_openai.embedding_requests[0].inputs == [" ", "x"]


def test_known_prefix_table():
    assert prefixes_for("nomic-ai/nomic-embed-text-v1.5").query == "search_query: "
    assert prefixes_for("nomic-embed-text").document == "search_document: "
    assert prefixes_for("all-MiniLM-L6-v2").query == ""
    assert prefixes_for("text-embedding-3-small").document == ""
    assert prefixes_for("intfloat/e5-base-v2").document == "passage: "


def test_factory_builds_the_remote_provider(fake_openai):
    embedder = make_embedder(Settings(embedding=fake_openai.embedding_settings(dimensions=64)))
    assert isinstance(embedder.inner, OpenAiEmbedder) and embedder.dimensions == 64

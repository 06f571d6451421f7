"""What an erasure deletes from the embedding caches (projections/erasure.py, docs/lineage.md)."""

from __future__ import annotations

import asyncio

import numpy as np

from core.embeddings.cache import text_key
from core.embeddings.stub import StubEmbedder
from projections.erasure import embedding_cache_keys
from projections.message_index import EMBED_CHARS
from retrieval.query_cache import CachedQueryEmbedder


def test_the_cache_keys_of_a_text_cover_every_prefix_and_the_message_index_cut():
    long = "word " * 1000
    keys = set(embedding_cache_keys(["short text", long, ""], document_prefix="custom: "))
    for prefix in ("", "search_document: ", "passage: ", "custom: "):
        assert text_key(prefix + "short text") in keys
        assert text_key(prefix + long) in keys and text_key(prefix + long[:EMBED_CHARS]) in keys
    assert text_key("") not in keys  # an empty text erases nothing
    assert embedding_cache_keys([]) == []


def test_an_erasure_empties_the_query_vector_cache():
    cache = CachedQueryEmbedder(StubEmbedder(dimensions=8))
    first = asyncio.run(cache.embed_query("what is alice's secret"))
    cache.clear()
    again = asyncio.run(cache.embed_query("what is alice's secret"))
    assert cache.misses == 2 and np.array_equal(first, again)

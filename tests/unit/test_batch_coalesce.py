"""The batch replay's cache lookups (memory_agent/batch_replay/coalesce.py): concurrent lookups
become one query with the same answers; a failed query fails every waiter."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from memory_agent.batch_replay.coalesce import CoalescedEmbeddingStore, CoalescedLlmCache


class Cache:
    def __init__(self, fail: bool = False) -> None:
        self.queries: list[tuple] = []
        self.fail = fail

    async def get_many(self, keys, kind):
        self.queries.append((kind, sorted(keys)))
        if self.fail:
            raise ConnectionError("down")
        return {k: {"out": k} for k in keys if k != "missing"}


def test_concurrent_lookups_are_one_query_per_kind_with_the_same_answers():
    async def run():
        inner = Cache()
        cache = CoalescedLlmCache(inner)
        found = await asyncio.gather(cache.get("a", "json"), cache.get("missing", "json"), cache.get("a", "json"),
                                     cache.get("s", "summary"))
        later = await cache.get("b", "json")
        return inner.queries, found, later

    queries, found, later = asyncio.run(run())
    assert found == [{"out": "a"}, None, {"out": "a"}, {"out": "s"}]
    assert later == {"out": "b"}
    assert sorted(queries) == [("json", ["a", "missing"]), ("json", ["b"]), ("summary", ["s"])]


def test_a_failed_query_fails_every_lookup_it_served():
    async def run():
        cache = CoalescedLlmCache(Cache(fail=True))
        return await asyncio.gather(cache.get("a", "json"), cache.get("b", "json"), return_exceptions=True)

    assert [type(r) for r in asyncio.run(run())] == [ConnectionError, ConnectionError]


def test_embedding_lookups_of_several_callers_are_one_query():
    class Store:
        def __init__(self) -> None:
            self.queries = []

        async def get_many(self, model, dimensions, keys):
            self.queries.append((model, dimensions, sorted(keys)))
            return {k: np.full(dimensions, len(k), dtype="<f4") for k in keys if k != b"new"}

    async def run():
        inner = Store()
        store = CoalescedEmbeddingStore(inner)
        first, second = await asyncio.gather(store.get_many("m", 2, [b"a", b"new"]), store.get_many("m", 2, [b"bb"]))
        return inner.queries, first, second

    queries, first, second = asyncio.run(run())
    assert queries == [("m", 2, [b"a", b"bb", b"new"])]
    assert list(first) == [b"a"] and first[b"a"].tolist() == [1.0, 1.0]
    assert second[b"bb"].tolist() == [2.0, 2.0]

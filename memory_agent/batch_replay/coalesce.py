"""One cache query per wave instead of one per chunk (batch replay of the facts system).

A wave runs the stage for every conversation's chunk concurrently; each run asks the LLM
cache for its extraction and the embedding cache for its vectors. These wrappers gather the
lookups made while the wave's tasks are runnable and send them as one `get_many`: the
same rows, the same hit counts, a fraction of the round trips. Everything else passes
through to the wrapped cache unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Hashable


class _Batcher:
    """Collects keys for one event-loop turn (and a few more while others join), then asks once."""

    def __init__(self, fetch: Callable[[Hashable, list], Awaitable[dict]]) -> None:
        self.fetch = fetch
        self.pending: dict[Hashable, dict[Any, asyncio.Future]] = {}
        self.flushing: set[Hashable] = set()

    async def get(self, group: Hashable, key: Any) -> Any:
        waiting = self.pending.setdefault(group, {})
        future = waiting.get(key)
        if future is None:
            future = waiting[key] = asyncio.get_running_loop().create_future()
        if group not in self.flushing:
            self.flushing.add(group)
            asyncio.get_running_loop().create_task(self._flush(group))
        return await asyncio.shield(future)

    async def _flush(self, group: Hashable) -> None:
        for _ in range(3):  # the other tasks of the wave reach their lookup meanwhile
            await asyncio.sleep(0)
        self.flushing.discard(group)
        waiting = self.pending.pop(group, {})
        if not waiting:
            return
        try:
            found = await self.fetch(group, list(waiting))
        except BaseException as exc:  # noqa: BLE001 - every waiter gets the error its own query would have
            for future in waiting.values():
                if not future.done():
                    future.set_exception(exc)
            return
        for key, future in waiting.items():
            if not future.done():
                future.set_result(found.get(key))


class CoalescedLlmCache:
    """core.llm.cache.LlmCache with `get` gathered into `get_many`."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self._batcher = _Batcher(lambda kind, keys: inner.get_many(keys, kind))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def get(self, key: str, kind: str) -> Any | None:
        return await self._batcher.get(kind, key)


class CoalescedEmbeddingStore:
    """core.embeddings.cache.EmbeddingStore with `get_many` calls gathered into one."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self._batcher = _Batcher(lambda ident, keys: inner.get_many(*ident, keys))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def get_many(self, model: str, dimensions: int, keys: list[bytes]) -> dict:
        found = await asyncio.gather(*(self._batcher.get((model, dimensions), key) for key in keys))
        return {key: vector for key, vector in zip(keys, found) if vector is not None}


def coalesce_lookups(completer, embedder) -> None:
    """Wrap the caches of a stage's JSON completer and embedder (when they have one)."""
    cache = getattr(completer, "cache", None) if completer is not None else None
    if cache is not None and hasattr(cache, "get_many"):
        completer.cache = CoalescedLlmCache(cache)
    store = getattr(embedder, "store", None)
    if store is not None and hasattr(store, "get_many"):
        embedder.store = CoalescedEmbeddingStore(store)

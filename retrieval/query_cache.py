"""The query embedding, cached in process: the same question (a retry, a popular query, a
follow-up embedded with the same earlier turns) is not run through the model twice."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import numpy as np

from core.embeddings import Embedder
from core.embeddings.port import DelegatingEmbedder


class CachedQueryEmbedder(DelegatingEmbedder):
    """An Embedder whose embed_query keeps the last `size` vectors by (model, text), least
    recently used out first. Documents are not cached (they are embedded once, by the worker).
    The vectors are returned read-only: a caller cannot change what the next one gets."""

    def __init__(self, inner: Embedder, size: int = 512) -> None:
        super().__init__(inner)
        self.size = size
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        # Embeddings running now: a second caller of the same text waits for the first's (the
        # context starts the current message's early: api.turn_context.warm_query_embedding).
        self._running: dict[tuple[str, str], asyncio.Future] = {}
        self._epoch = 0  # bumped by clear(): a vector still being made then is not kept
        self.hits = self.misses = 0

    async def embed_query(self, text: str) -> np.ndarray:
        key = (self.inner.model, text)
        vector = self._vectors.get(key)
        if vector is not None:
            self._vectors.move_to_end(key)
            self.hits += 1
            return vector
        running = self._running.get(key)
        if running is not None:
            self.hits += 1
            return await asyncio.shield(running)
        self.misses += 1
        running = self._running[key] = asyncio.ensure_future(self._embed(key, text, self._epoch))
        running.add_done_callback(lambda done: self._running.pop(key, None) if self._running.get(key) is done
                                  else None)
        return await asyncio.shield(running)

    async def _embed(self, key: tuple[str, str], text: str, epoch: int) -> np.ndarray:
        vector = np.asarray(await self.inner.embed_query(text), dtype=np.float32)
        vector.setflags(write=False)
        if self.size > 0 and epoch == self._epoch:
            self._vectors[key] = vector
            if len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return vector

    def clear(self) -> None:
        """Forget every cached query vector (an erasure: a vector of the erased user's question
        must not outlive it in this process), and keep none of those being made now."""
        self._vectors.clear()
        self._running.clear()
        self._epoch += 1

"""The query embedding, cached in process: the same question (a retry, a popular query, a
follow-up embedded with the same earlier turns) is not run through the model twice."""

from __future__ import annotations

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
        self.hits = self.misses = 0

    async def embed_query(self, text: str) -> np.ndarray:
        key = (self.inner.model, text)
        vector = self._vectors.get(key)
        if vector is not None:
            self._vectors.move_to_end(key)
            self.hits += 1
            return vector
        self.misses += 1
        vector = np.asarray(await self.inner.embed_query(text), dtype=np.float32)
        vector.setflags(write=False)
        if self.size > 0:
            self._vectors[key] = vector
            if len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return vector

    def clear(self) -> None:
        """Forget every cached query vector (an erasure: a vector of the erased user's question
        must not outlive it in this process)."""
        self._vectors.clear()

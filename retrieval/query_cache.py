"""The query embedding, cached in process: the same question (a retry, a popular query, a
follow-up embedded with the same earlier turns) is not run through the model twice."""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from memory_agent.embeddings import Embedder


class CachedQueryEmbedder:
    """An Embedder whose embed_query keeps the last `size` vectors by (model, text), least
    recently used out first. Documents are not cached (they are embedded once, by the worker).
    The vectors are returned read-only: a caller cannot change what the next one gets."""

    def __init__(self, inner: Embedder, size: int = 512) -> None:
        self.inner, self.size = inner, size
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self.hits = self.misses = 0

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self.inner.embed_documents(texts)

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

    async def aclose(self) -> None:
        await self.inner.aclose()

"""What the memory systems need from an embedding model, independent of any provider."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


class EmbeddingError(Exception):
    """No vectors: `retryable` says whether the same request may succeed later."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@runtime_checkable
class Embedder(Protocol):
    """Unit-length float32 vectors; query and document prefixes are applied inside."""

    @property
    def model(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dimensions) float32, rows L2-normalised; (0, d) for no texts."""
        ...

    async def embed_query(self, text: str) -> np.ndarray:
        """(dimensions,) float32, L2-normalised."""
        ...

    async def aclose(self) -> None: ...


class DelegatingEmbedder:
    """An Embedder wrapping `inner`: model, dimensions and every call go to it unless a subclass
    says otherwise (the caches of documents and of queries override one side each)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self.inner.embed_documents(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return await self.inner.embed_query(text)

    async def aclose(self) -> None:
        await self.inner.aclose()


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)

"""A model-free embedder for benchmarks and tests of the plumbing: deterministic vectors, no cost."""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from core.embeddings.port import l2_normalise
from core.embeddings.prefixes import Prefixes

MODEL_NAME = "stub-shake256"


class StubEmbedder:
    """Each text maps to a fixed unit vector (shake-256 of its bytes): equal texts, equal vectors,
    different texts nearly orthogonal. Not a language model: similarity means nothing beyond
    equality. Selected with `embedding.provider = "stub"` (bench/system_bench.py)."""

    def __init__(self, dimensions: int = 384) -> None:
        self._dimensions = dimensions

    @property
    def model(self) -> str:
        return MODEL_NAME

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def prefixes(self) -> Prefixes:
        return Prefixes()

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        """Blocking, as the embedding queue runs a model (memory_agent/embeddings/queue.py)."""
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        return l2_normalise(np.stack([self._vector(t) for t in texts]))

    def _vector(self, text: str) -> np.ndarray:
        raw = hashlib.shake_256(text.encode()).digest(self._dimensions)
        return np.frombuffer(raw, dtype=np.int8).astype(np.float32)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_sync(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return l2_normalise(self._vector(text))

    async def aclose(self) -> None:
        return None

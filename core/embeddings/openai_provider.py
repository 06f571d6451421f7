"""Embeddings from any OpenAI-compatible /v1/embeddings endpoint (OpenAI, Ollama, vLLM)."""

from __future__ import annotations

import asyncio
from typing import Sequence

import numpy as np

from core.embeddings.port import EmbeddingError, l2_normalise
from core.embeddings.prefixes import prefixes_for
from core.llm.retry import RetryPolicy, call_with_retries
from core.settings import EmbeddingSettings


def accepts_dimensions(model: str) -> bool:
    """Only the text-embedding-3 family lets the caller shorten vectors."""
    return "text-embedding-3" in model.lower()


class OpenAiEmbedder:
    """Batches texts, applies the model's prefixes, checks and normalises the vectors."""

    def __init__(
        self,
        *,
        model: str,
        dimensions: int,
        base_url: str | None = None,
        api_key: str = "not-needed",
        timeout_s: float = 30.0,
        max_retries: int = 3,
        batch_size: int = 32,
        concurrency: int = 4,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        send_dimensions: bool | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
    ) -> None:
        self._model = model
        self._dimensions = dimensions
        self._batch_size = batch_size
        self._prefixes = prefixes_for(model, query_prefix, document_prefix)
        self._send_dimensions = accepts_dimensions(model) if send_dimensions is None else send_dimensions
        self._policy = RetryPolicy(max_retries, backoff_base_s, backoff_max_s)
        self._semaphore = asyncio.Semaphore(concurrency)
        from openai import AsyncOpenAI  # imported when used: ~2 CPU-s at every process start otherwise

        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0
        )

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings) -> "OpenAiEmbedder":
        return cls(
            model=settings.model,
            dimensions=settings.dimensions,
            base_url=settings.base_url,
            api_key=settings.api_key.get_secret_value(),
            timeout_s=settings.timeout_s,
            max_retries=settings.max_retries,
            batch_size=settings.batch_size,
            concurrency=settings.concurrency,
            query_prefix=settings.query_prefix,
            document_prefix=settings.document_prefix,
            send_dimensions=settings.send_dimensions,
        )

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        texts = [self._prefixes.document + t for t in texts]
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        batches = [texts[i : i + self._batch_size] for i in range(0, len(texts), self._batch_size)]
        parts = await asyncio.gather(*(self._embed_batch(b) for b in batches))
        return np.concatenate(parts, axis=0)

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self._embed_batch([self._prefixes.query + text]))[0]

    async def aclose(self) -> None:
        await self._client.close()

    async def _embed_batch(self, texts: list[str]) -> np.ndarray:
        # Empty strings are refused by OpenAI; a single space embeds as "nothing".
        inputs = [t if t.strip() else " " for t in texts]
        extra = {"dimensions": self._dimensions} if self._send_dimensions else {}

        async def attempt():
            async with self._semaphore:
                return await self._client.embeddings.create(
                    model=self._model, input=inputs, encoding_format="float", **extra
                )

        response = await call_with_retries(
            attempt,
            self._policy,
            what=f"embeddings ({self._model})",
            wrap=lambda message, retryable: EmbeddingError(message, retryable=retryable),
        )
        data = getattr(response, "data", None)
        if not isinstance(data, list) or len(data) != len(inputs):
            raise EmbeddingError(
                f"expected {len(inputs)} embeddings, got {len(data) if isinstance(data, list) else data!r}",
                retryable=True,
            )
        rows = sorted(data, key=lambda item: getattr(item, "index", 0))
        try:
            vectors = np.array([row.embedding for row in rows], dtype=np.float32)
        except (TypeError, ValueError, AttributeError) as error:
            raise EmbeddingError(f"malformed embeddings: {error}", retryable=True) from error
        if vectors.ndim != 2 or vectors.shape[1] != self._dimensions:
            raise EmbeddingError(
                f"{self._model} returned vectors of shape {vectors.shape}, "
                f"configured dimensions={self._dimensions}",
                retryable=False,
            )
        return l2_normalise(vectors)

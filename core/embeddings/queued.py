"""The process's one model behind one queue: every `make_embedder` of a process shares it.

`shared_queued(key, build)` returns a handle on the queue registered under `key` (the provider's
settings), building the model and its queue on first use; the queue closes (after answering what
it holds) when the last handle is closed, so one ONNX session serves every caller of a process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

import numpy as np

from core.embeddings.prefixes import Prefixes
from core.embeddings.queue import EmbeddingQueue
from core.metrics import EMBEDDING_MODELS_LOADED


class BatchModel(Protocol):
    """A blocking model: what `EmbeddingQueue` runs (LocalOnnxEmbedder, StubEmbedder)."""

    @property
    def model(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    @property
    def prefixes(self) -> Prefixes: ...

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray: ...


class _Shared:
    def __init__(self, provider: BatchModel, queue: EmbeddingQueue) -> None:
        self.provider, self.queue, self.handles = provider, queue, 0


_REGISTRY: dict[Hashable, _Shared] = {}
_REGISTRY_LOCK = threading.Lock()


class QueuedEmbedder:
    """An Embedder whose every call goes through the process's queue for its model; prefixes are
    applied here, the queue sees the texts exactly as the model does."""

    def __init__(self, key: Hashable, shared: _Shared) -> None:
        self._key, self._shared, self._closed = key, shared, False

    @property
    def model(self) -> str:
        return self._shared.provider.model

    @property
    def dimensions(self) -> int:
        return self._shared.provider.dimensions

    @property
    def provider(self) -> BatchModel:
        return self._shared.provider

    @property
    def queue(self) -> EmbeddingQueue:
        return self._shared.queue

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        prefix = self._shared.provider.prefixes.document
        return await self._shared.queue.embed([prefix + t for t in texts])

    async def embed_query(self, text: str) -> np.ndarray:
        # urgent: a person waits on a query (the context endpoint), so an idle model runs it at once
        return (await self._shared.queue.embed([self._shared.provider.prefixes.query + text], urgent=True))[0]

    async def aclose(self) -> None:
        """Releases this handle; the last one closes the queue (what it holds is answered first)."""
        if self._closed:
            return
        self._closed = True
        with _REGISTRY_LOCK:
            self._shared.handles -= 1
            last = self._shared.handles == 0
            if last and _REGISTRY.get(self._key) is self._shared:
                del _REGISTRY[self._key]
                EMBEDDING_MODELS_LOADED.set(len(_REGISTRY))
        if last:
            await self._shared.queue.aclose()


def shared_queued(key: Hashable, build: Callable[[], BatchModel], *, batch_size: int, linger_s: float,
                  max_pending: int) -> QueuedEmbedder:
    """A handle on the process's queue for `key`; `build` makes the model the first time only."""
    with _REGISTRY_LOCK:
        shared = _REGISTRY.get(key)
        if shared is None:
            provider = build()
            queue = EmbeddingQueue(provider.embed_sync, provider.dimensions, batch_size=batch_size,
                                   linger_s=linger_s, max_pending=max_pending,
                                   name=f"embedding-queue-{provider.model}")
            shared = _REGISTRY[key] = _Shared(provider, queue)
            EMBEDDING_MODELS_LOADED.set(len(_REGISTRY))
        shared.handles += 1
        return QueuedEmbedder(key, shared)


def shared_count() -> int:
    """Queues (so models) alive in this process."""
    with _REGISTRY_LOCK:
        return len(_REGISTRY)

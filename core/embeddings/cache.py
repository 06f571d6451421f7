"""Document embeddings cached in PostgreSQL by (model, dimensions, sha256 of the text the model sees).

Every consumer that embeds (message index, topic stages, chunk/fact extraction) gets its embedder
from `make_embedder`, which wraps the provider in `CachedEmbedder`: a message embedded by one
consumer is read back by the next, and a replay without a model change embeds nothing. Query
embeddings (the read path) are cached in process only, never in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
from psycopg_pool import AsyncConnectionPool

from core import telemetry
from core.embeddings.port import DelegatingEmbedder, Embedder
from core.metrics import (
    EMBEDDING_CACHE, EMBEDDING_CLOCK, EMBEDDING_MODEL_CALLS, EMBEDDING_MODEL_FAILURES, EMBEDDING_MODEL_TEXTS,
)

log = logging.getLogger(__name__)


@contextmanager
def _model_call(kind: str) -> Iterator[None]:
    """One call to the model: its CPU time (EMBEDDING_CLOCK), and a failure counted by kind."""
    try:
        with EMBEDDING_CLOCK, telemetry.span(f"embedding {kind}", {"gen_ai.operation.name": "embeddings"},
                                             kind="client"):
            yield
    except Exception:
        EMBEDDING_MODEL_FAILURES.labels(kind).inc()
        raise

# The keys and vectors as binary parameters (`%b`) and the rows read back in binary: in text a
# bytea array is escaped byte by byte in Python, ~0.8 CPU-ms for 20 vectors of 384 floats against
# ~0.14 in binary (docs/scaling.md, stub12).
_SELECT = (
    "SELECT text_sha256, vector FROM public.embedding_cache"
    " WHERE model = %s AND dimensions = %s AND text_sha256 = ANY(%b)"
)
_INSERT = (  # never a text an erasure removed (public.erased_text_keys, projections/erasure.py)
    "INSERT INTO public.embedding_cache (model, dimensions, text_sha256, vector)"
    " SELECT %s, %s, h, v FROM unnest(%b::bytea[], %b::bytea[]) AS x(h, v)"
    " WHERE NOT EXISTS (SELECT 1 FROM public.erased_text_keys e WHERE e.deployment = %s AND e.text_sha256 = x.h)"
    " ON CONFLICT DO NOTHING"
)


def text_key(seen_text: str) -> bytes:
    """The cache key of a text exactly as the model receives it (task prefix included)."""
    return hashlib.sha256(seen_text.encode()).digest()


# Texts being embedded right now by any CachedEmbedder of the process, by (model, dimensions, key):
# consumers reading the same message at once (message index, topic stage) share one model call.
_IN_FLIGHT: dict[tuple[str, int, bytes], asyncio.Future] = {}


class EmbeddingStore:
    """public.embedding_cache: one query per batch, both ways."""

    def __init__(self, dsn: str, *, max_connections: int = 2, timeout_s: float = 5.0, deployment: str = "") -> None:
        """`deployment`: the topic prefix whose erased texts are never written (public.erased_text_keys)."""
        self.dsn, self.max_connections, self.timeout_s = dsn, max_connections, timeout_s
        self.deployment = deployment
        self._pool: AsyncConnectionPool | None = None

    async def _connection(self):
        if self._pool is None:
            # Autocommit: each lookup or write is one statement, one round trip (not a transaction
            # around it, whose COMMIT was a second round trip when the pool took the connection back).
            self._pool = AsyncConnectionPool(self.dsn, min_size=0, max_size=self.max_connections,
                                             timeout=self.timeout_s, open=False, kwargs={"autocommit": True})
            await self._pool.open()
        return self._pool.connection()

    async def get_many(self, model: str, dimensions: int, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        async with await self._connection() as conn:
            rows = await (await conn.execute(_SELECT, (model, dimensions, keys), binary=True)).fetchall()
        size = dimensions * 4
        return {bytes(k): np.frombuffer(v, dtype="<f4") for k, v in rows if len(v) == size}

    async def put_many(self, model: str, dimensions: int, keys: list[bytes], vectors: np.ndarray) -> None:
        blobs = [np.ascontiguousarray(v, dtype="<f4").tobytes() for v in vectors]
        async with await self._connection() as conn:
            await conn.execute(_INSERT, (model, dimensions, keys, blobs, self.deployment))

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()


class CachedEmbedder(DelegatingEmbedder):
    """An Embedder that asks `store` first for documents; misses go to `inner` in one call.

    `store=None` only meters the model (calls, texts, CPU). A store that fails (PostgreSQL
    unreachable, table missing) is bypassed for `retry_after_s`: embedding never stops because
    the cache does. Equal texts within one batch are embedded once.
    """

    def __init__(self, inner: Embedder, store: EmbeddingStore | None, *, document_prefix: str = "",
                 retry_after_s: float = 30.0) -> None:
        super().__init__(inner)
        self.store, self.document_prefix = store, document_prefix
        self.retry_after_s = retry_after_s
        self._store_down_until = 0.0

    async def _embed(self, texts: list[str]) -> np.ndarray:
        EMBEDDING_MODEL_CALLS.labels("documents").inc()
        EMBEDDING_MODEL_TEXTS.inc(len(texts))
        with _model_call("documents"):
            return await self.inner.embed_documents(texts)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        if self.store is None or time.monotonic() < self._store_down_until:
            return await self._embed(texts)
        keys = [text_key(self.document_prefix + t) for t in texts]
        first: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        unique = list(first)
        try:
            found = await self.store.get_many(self.model, self.dimensions, unique)
        except Exception as error:  # noqa: BLE001 - the cache is an optimisation, the model is the truth
            log.warning("embedding cache unavailable for %.0f s, embedding uncached: %s", self.retry_after_s, error)
            self._store_down_until = time.monotonic() + self.retry_after_s
            EMBEDDING_CACHE.labels("error").inc(len(texts))
            return await self._embed(texts)
        missing = [k for k in unique if k not in found]
        EMBEDDING_CACHE.labels("hit").inc(len(texts) - len(missing))
        EMBEDDING_CACHE.labels("miss").inc(len(missing))
        ident = (self.model, self.dimensions)
        theirs = {k: _IN_FLIGHT[(*ident, k)] for k in missing if (*ident, k) in _IN_FLIGHT}
        mine = [k for k in missing if k not in theirs]
        if mine:
            await self._embed_and_store(mine, [texts[first[k]] for k in mine], found)
        for key, future in theirs.items():  # another consumer's call: its result, or its error
            found[key] = await asyncio.shield(future)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    async def _embed_and_store(self, keys: list[bytes], texts: list[str], found: dict) -> None:
        """Embed `texts` in one call, publish the vectors to waiting consumers, write them back;
        the keys stay in flight until the rows are written, so no one misses in between."""
        ident = (self.model, self.dimensions)
        futures = {k: asyncio.get_running_loop().create_future() for k in keys}
        _IN_FLIGHT.update({(*ident, k): f for k, f in futures.items()})
        try:
            try:
                vectors = await self._embed(texts)
            except BaseException as error:
                for future in futures.values():
                    if isinstance(error, Exception):
                        future.set_exception(error)
                        future.exception()  # retrieved: no warning when no other consumer waited
                    else:
                        future.cancel()
                raise
            for k, vector in zip(keys, vectors):
                futures[k].set_result(vector)
                found[k] = vector
            try:
                await self.store.put_many(self.model, self.dimensions, keys, vectors)
            except Exception as error:  # noqa: BLE001 - the vectors are good; the next call embeds again
                log.warning("embedding cache write failed: %s", error)
                self._store_down_until = time.monotonic() + self.retry_after_s
        finally:
            for k in keys:
                _IN_FLIGHT.pop((*ident, k), None)

    async def embed_query(self, text: str) -> np.ndarray:
        """Straight to the model: the read path never waits on PostgreSQL for its embedding (the
        API keeps its own in-process LRU of query vectors: retrieval/query_cache.py)."""
        EMBEDDING_MODEL_CALLS.labels("query").inc()
        with _model_call("query"):
            return await self.inner.embed_query(text)

    async def aclose(self) -> None:
        await self.inner.aclose()
        if self.store is not None:
            await self.store.aclose()

    def __getattr__(self, name: str):  # provider extras (e.g. LocalOnnxEmbedder.embed_sync) pass through
        return getattr(self.inner, name)

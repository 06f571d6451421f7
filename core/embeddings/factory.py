"""Build the configured embedder from Settings."""

from __future__ import annotations

from core.embeddings.cache import CachedEmbedder, EmbeddingStore
from core.embeddings.local_onnx import ACCEPTED_NAMES, DIMENSIONS, LocalOnnxEmbedder
from core.embeddings.openai_provider import OpenAiEmbedder
from core.embeddings.port import Embedder
from core.embeddings.prefixes import prefixes_for
from core.embeddings.queued import shared_queued
from core.embeddings.stub import StubEmbedder
from core.settings import Settings


def make_embedder(settings: Settings) -> CachedEmbedder:
    """The provider behind `CachedEmbedder`: document embeddings through public.embedding_cache
    (unless `embedding.cache_enabled` is off), queries cached in process only."""
    inner = make_provider(settings)
    config = settings.embedding
    store = EmbeddingStore(settings.postgres.dsn, deployment=settings.kafka.topic_prefix) if config.cache_enabled \
        else None
    prefix = prefixes_for(inner.model, config.query_prefix, config.document_prefix).document
    return CachedEmbedder(inner, store, document_prefix=prefix)


def make_provider(settings: Settings) -> Embedder:
    """"openai" -> OpenAiEmbedder; "local" (the offline default) -> LocalOnnxEmbedder; "stub" -> StubEmbedder.
    The local and stub models run once per process behind its embedding queue (QueuedEmbedder):
    every caller's texts are batched together on one thread, with one ONNX session."""
    config = settings.embedding
    if config.provider == "openai":
        return OpenAiEmbedder.from_settings(config)
    queue = dict(batch_size=config.batch_size, linger_s=config.queue_linger_ms / 1000,
                 max_pending=config.queue_max_pending)
    if config.provider == "stub":
        return shared_queued(("stub", config.dimensions, *queue.values()),
                             lambda: StubEmbedder(config.dimensions), **queue)
    if config.model.lower() not in ACCEPTED_NAMES:
        raise ValueError(
            f"the local provider ships only all-MiniLM-L6-v2, not {config.model!r}; "
            "use provider 'openai' (any compatible server) for other models"
        )
    if config.dimensions != DIMENSIONS:
        raise ValueError(f"all-MiniLM-L6-v2 has {DIMENSIONS} dimensions, not {config.dimensions}")
    local = dict(max_length=config.max_length, batch_size=config.batch_size,
                 intra_op_threads=config.intra_op_threads, query_prefix=config.query_prefix,
                 document_prefix=config.document_prefix, integer_matmul=config.integer_matmul)
    return shared_queued(("local", *local.values(), *queue.values()), lambda: LocalOnnxEmbedder(**local), **queue)

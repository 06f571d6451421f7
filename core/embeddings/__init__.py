"""Embedding port: unit-length float32 vectors from a local ONNX model or an OpenAI-compatible API."""

from core.embeddings.factory import make_embedder
from core.embeddings.local_onnx import LocalOnnxEmbedder
from core.embeddings.openai_provider import OpenAiEmbedder
from core.embeddings.port import Embedder, EmbeddingError, l2_normalise
from core.embeddings.prefixes import KNOWN_PREFIXES, Prefixes, prefixes_for

__all__ = [
    "KNOWN_PREFIXES",
    "Embedder",
    "EmbeddingError",
    "LocalOnnxEmbedder",
    "OpenAiEmbedder",
    "Prefixes",
    "l2_normalise",
    "make_embedder",
    "prefixes_for",
]

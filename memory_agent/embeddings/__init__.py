"""Embedding port: unit-length float32 vectors from a local ONNX model or an OpenAI-compatible API."""

from memory_agent.embeddings.factory import make_embedder
from memory_agent.embeddings.local_onnx import LocalOnnxEmbedder
from memory_agent.embeddings.openai_provider import OpenAiEmbedder
from memory_agent.embeddings.port import Embedder, EmbeddingError, l2_normalise
from memory_agent.embeddings.prefixes import KNOWN_PREFIXES, Prefixes, prefixes_for

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

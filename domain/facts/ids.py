"""Deterministic chunk and fact ids, and embeddings as event payloads."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import numpy as np

from schemas.facts_events import Vector

# Fixed namespace: the same (tenant, conversation, range, text) gives the same id in every
# generation, so a replay re-creates the ids that owners' decisions refer to.
_NAMESPACE = uuid.UUID("6f1c2a52-8d0b-4c1e-9a3e-3b8f0c7d5e21")
# Seven decimals keep cosine similarity exact to ~1e-6 and halve the event size.
_DECIMALS = 7


def chunk_id(tenant_id: str, conversation_id: str, start_seq: int, end_seq_exclusive: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"chunk/{tenant_id}/{conversation_id}/{start_seq}/{end_seq_exclusive}"))


def fact_id(tenant_id: str, conversation_id: str, start_seq: int, end_seq_exclusive: int, content: str) -> str:
    """A fact of one range, named by its normalised text rather than its position in the answer:
    a replay whose model lists the same facts in another order must not give one fact's id (and
    so the owner's decisions on it) to another."""
    text = " ".join(content.casefold().split())
    return str(uuid.uuid5(_NAMESPACE, f"fact/{tenant_id}/{conversation_id}/{start_seq}/{end_seq_exclusive}/{text}"))


def stored_fact_id(tenant_id: str, event_id: str) -> str:
    """The fact a memory stored by hand becomes (unless dedup merges it into an existing one)."""
    return str(uuid.uuid5(_NAMESPACE, f"stored/{tenant_id}/{event_id}"))


def to_vector(values: np.ndarray | Sequence[float], model: str) -> Vector:
    """An embedding as it travels in events: rounded floats, model and dimension."""
    floats = [round(float(v), _DECIMALS) for v in np.asarray(values, dtype=np.float64).ravel()]
    return Vector(model=model, dimensions=len(floats), values=floats)


def from_vector(vector: Vector) -> np.ndarray:
    return np.asarray(vector.values, dtype=np.float32)


def vector_literal(values: Sequence[float]) -> str:
    """pgvector's text input, '[0.1,0.2,...]'."""
    return "[" + ",".join(repr(float(v)) for v in values) + "]"

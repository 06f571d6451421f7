"""Owners' decisions on facts, re-applied to re-extracted facts (replay): matching and resolution.

Rule (docs/facts.md): decisions are grouped by the fact id they were made on. A fact matches a
group when it has that id, or when it has the same tenant, owner and subject, the same embedding
model as one of the group's snapshots, cosine >= the threshold to it, and no contradiction with
its text (so "lives in Porto" never inherits a decision on "lives in Lisbon"). From a matching
group a fact gets every decision made on its own id, and every other decision made at or after
the moment the fact was stated (its valid_from): saying something again after deleting it
brings it back, in the live run and in a replay alike. Applied decisions resolve in time order:
the last visibility decision wins, the last edit wins, the first deletion deletes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Sequence

import numpy as np

from domain.facts.dedup import contradiction, cosine_similarity

Action = Literal["edited", "shared", "unshared", "deleted"]


@dataclass(frozen=True)
class Decision:
    event_id: str
    fact_id: str
    owner: str
    subject: str | None
    action: Action
    content_snapshot: str
    decided_at: datetime
    snapshot_embedding: np.ndarray | None = None
    snapshot_model: str | None = None
    new_content: str | None = None
    new_embedding: np.ndarray | None = None
    new_embedding_model: str | None = None


@dataclass(frozen=True)
class FactView:
    fact_id: str
    owner: str
    subject: str | None
    content: str
    embedding: np.ndarray
    embedding_model: str
    valid_from: datetime


@dataclass(frozen=True)
class Managed:
    """What the owner's decisions make of a fact; None fields are left as extracted."""

    visibility: Literal["private", "shared"] | None = None
    content: str | None = None
    embedding: np.ndarray | None = None
    deleted_at: datetime | None = None
    applied: tuple[Decision, ...] = ()


def similar(decision: Decision, fact: FactView, threshold: float) -> bool:
    """Same owner and subject, same vector space, close in meaning, and not a changed value."""
    if (decision.owner, decision.subject) != (fact.owner, fact.subject) or decision.snapshot_embedding is None:
        return False
    if decision.snapshot_model != fact.embedding_model or len(decision.snapshot_embedding) != len(fact.embedding):
        return False
    if cosine_similarity(decision.snapshot_embedding, fact.embedding) < threshold:
        return False
    return contradiction(decision.content_snapshot, fact.content) is None


def applicable(decisions: Sequence[Decision], fact: FactView, threshold: float) -> list[Decision]:
    """The decisions that apply to `fact`, in the order they resolve (time, then event id)."""
    groups: dict[str, list[Decision]] = {}
    for decision in decisions:
        groups.setdefault(decision.fact_id, []).append(decision)
    chosen: dict[str, Decision] = {}
    for fact_id, group in groups.items():
        if fact_id == fact.fact_id:
            chosen.update((d.event_id, d) for d in group if d.owner == fact.owner)
        elif any(similar(d, fact, threshold) for d in group):
            chosen.update((d.event_id, d) for d in group if d.decided_at >= fact.valid_from)
    return sorted(chosen.values(), key=lambda d: (d.decided_at, d.event_id))


def resolve(decisions: Sequence[Decision], fact: FactView) -> Managed:
    """Fold applicable decisions (already in order) into the managed fields of `fact`."""
    visibility = content = embedding = deleted_at = None
    for decision in decisions:
        if decision.action in ("shared", "unshared"):
            visibility = "shared" if decision.action == "shared" else "private"
        elif decision.action == "edited":
            content = decision.new_content
            same_space = decision.new_embedding is not None and decision.new_embedding_model == fact.embedding_model
            embedding = decision.new_embedding if same_space else None
        elif decision.action == "deleted" and deleted_at is None:
            deleted_at = decision.decided_at
    return Managed(visibility, content, embedding, deleted_at, tuple(decisions))

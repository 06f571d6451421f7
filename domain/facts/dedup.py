"""Fact dedup and contradiction decisions (seeds 001, 003): merge, supersede, or insert."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import numpy as np

Action = Literal["merge", "supersede", "insert"]
LinkType = Literal["supersedes", "contradicts", "elaborates"]
Relation = Literal["duplicate", "contradicts", "elaborates", "unrelated"]

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NEGATION = frozenset("not no never longer anymore don't doesn't didn't isn't wasn't aren't"
                      " weren't won't can't cannot hasn't haven't".split())
# Leading words that only name the subject ("the user", "my", "he"): a shared prefix made of
# these alone is no shared predicate ("my daughter..." vs "my son..." are different facts).
_SUBJECT = frozenset("i i'm we my our the user user's he she they his her their it its".split())
_FILLER = frozenset("a an the of to in on at and or".split())


@dataclass(frozen=True)
class DedupConfig:
    merge_threshold: float = 0.85  # seed 001: "> 0.85 similarity" is the same memory
    contradiction_threshold: float = 0.6  # same category/subject and this close: compare values
    related_threshold: float = 0.7  # below merge but this close: insert with an "elaborates" link
    max_value_tokens: int = 4  # a differing "value" longer than this is a different statement


@dataclass(frozen=True)
class NewFact:
    content: str
    embedding: np.ndarray
    category: str
    owner: str
    subject: str
    importance: int = 3
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Neighbour:
    """A current (not superseded) fact near the new one, with its cosine similarity to it."""

    fact_id: str
    content: str
    category: str
    owner: str
    subject: str
    similarity: float
    importance: int = 3
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class LlmVerdict:
    """An explicit model judgement of the new fact against one neighbour; it wins over rules."""

    relation: Relation
    target_fact_id: str


@dataclass(frozen=True)
class FactDecision:
    action: Action
    target_fact_id: str | None = None
    link_type: LinkType | None = None
    merged_fields: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / norm) if norm else 0.0


def contradiction(old: str, new: str, max_value_tokens: int = 4) -> str | None:
    """Why `new` contradicts `old`, or None. Strip the common leading and trailing words:
    if what is left on one side is only negation ("no longer", "not"), it is a negation; if
    both sides keep a short differing value after a shared predicate ("lives in" Lisbon /
    Porto, "have" 2 / 3 kids), the value changed. Anything else is not a contradiction."""
    old, new = _undated(old), _undated(new)  # "yesterday (7 May)" vs "(14 May)": two events, not a change
    a, b = _TOKEN.findall(old.lower()), _TOKEN.findall(new.lower())
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    left, right = a[prefix:len(a) - suffix], b[prefix:len(b) - suffix]
    if not left and not right:
        return None
    if bool(left) != bool(right):
        extra = left or right
        return f"negation: {' '.join(extra)!r}" if set(extra) <= _NEGATION else None
    predicate = [w for w in a[:prefix] if w not in _SUBJECT]
    values = [w for w in left + right if w not in _FILLER]
    if predicate and values and max(len(left), len(right)) <= max_value_tokens:
        if (_NEGATION & set(left)) != (_NEGATION & set(right)):
            return f"negation: {' '.join(left)!r} vs {' '.join(right)!r}"
        return f"value changed after {' '.join(a[:prefix])!r}: {' '.join(left)!r} -> {' '.join(right)!r}"
    return None


_DATE_NOTE = re.compile(r"\s*\([^()]*\b\d{4}\)")  # a resolved date: "(7 May 2023)", "(the week before ...)"


def _undated(text: str) -> str:
    return _DATE_NOTE.sub("", text)


def _other_event(old: str, new: str) -> bool:
    """Both dated, on different dates: the same kind of event again, not the same fact."""
    a, b = set(_DATE_NOTE.findall(old)), set(_DATE_NOTE.findall(new))
    return bool(a) and bool(b) and {x.strip() for x in a} != {x.strip() for x in b}


def _merge(new: NewFact, old: Neighbour, now: float, reason: str) -> FactDecision:
    """Keep the existing fact, bump importance to the max, union tags; the longer wording wins
    and the replaced wording is returned as `previous_content` for the fact's history."""
    fields: dict[str, Any] = {
        "importance": max(old.importance, new.importance),
        "tags": tuple(dict.fromkeys(old.tags + new.tags)),
        "updated_at": now,
        "content": old.content,
    }
    if len(new.content.strip()) > len(old.content.strip()):
        fields.update(content=new.content, previous_content=old.content)
    return FactDecision("merge", old.fact_id, None, fields, reason)


def _supersede(old: Neighbour, now: float, reason: str) -> FactDecision:
    """The old fact is closed (valid_to = now), never deleted; the new one links to it."""
    return FactDecision("supersede", old.fact_id, "supersedes", {"valid_to": now}, reason)


def _from_verdict(new: NewFact, old: Neighbour, verdict: LlmVerdict, now: float) -> FactDecision:
    why = f"extractor verdict: {verdict.relation}"  # the LLM or the offline rules
    if verdict.relation == "duplicate":
        return _merge(new, old, now, why)
    if verdict.relation == "contradicts":
        return _supersede(old, now, why)
    if verdict.relation == "elaborates":
        return FactDecision("insert", old.fact_id, "elaborates", {}, why)
    return FactDecision("insert", None, None, {}, why)


def _contradicted(new: NewFact, near: Sequence[Neighbour], config: DedupConfig) -> tuple[Neighbour, str] | None:
    for old in near:
        if old.similarity < config.contradiction_threshold:
            break
        why = contradiction(old.content, new.content, config.max_value_tokens) \
            if old.category == new.category else None
        if why is not None:
            return old, why
    return None


def decide_fact(new: NewFact, neighbours: Sequence[Neighbour], now: float,
                config: DedupConfig = DedupConfig(), verdict: LlmVerdict | None = None) -> FactDecision:
    """Decide against the nearest current facts of the same subject. Order: an LLM verdict
    (if its target is one of the owner's neighbours); the owner's contradiction (checked before
    merge, because "lives in Lisbon"/"lives in Porto" can embed above the merge threshold);
    merge at similarity >= merge_threshold; another owner's contradiction (linked, never
    changed); an "elaborates" link at >= related_threshold; else a plain insert."""
    ranked = sorted((n for n in neighbours if n.subject == new.subject),
                    key=lambda n: (-n.similarity, n.fact_id))
    mine = [n for n in ranked if n.owner == new.owner]
    if verdict is not None:
        target = next((n for n in mine if n.fact_id == verdict.target_fact_id), None)
        if target is not None:
            return _from_verdict(new, target, verdict, now)
    found = _contradicted(new, mine, config)
    if found is not None:
        return _supersede(found[0], now, found[1])
    if mine and mine[0].similarity >= config.merge_threshold:
        if _other_event(mine[0].content, new.content):
            return FactDecision("insert", mine[0].fact_id, "elaborates", {},
                                f"similarity {mine[0].similarity:.3f} but another date: another event")
        return _merge(new, mine[0], now, f"similarity {mine[0].similarity:.3f} >= {config.merge_threshold}")
    found = _contradicted(new, [n for n in ranked if n.owner != new.owner], config)
    if found is not None:
        return FactDecision("insert", found[0].fact_id, "contradicts", {}, f"another owner's fact: {found[1]}")
    if mine and mine[0].similarity >= config.related_threshold:
        return FactDecision("insert", mine[0].fact_id, "elaborates", {},
                            f"related: similarity {mine[0].similarity:.3f}")
    return FactDecision("insert", None, None, {}, "no close fact")

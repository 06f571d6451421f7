"""Seed 001's relevance score: similarity x importance weight x recency weight, explained."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Collection, Iterable, Literal, Sequence

DAY_S = 86_400.0

Kind = Literal["fact", "chunk", "message", "memory"]
Reason = Literal["below_threshold", "already_surfaced", "over_budget", "duplicate"]


@dataclass(frozen=True)
class ScoringConfig:
    # Seed 001: inject only when final_score > 0.45 (strictly greater).
    threshold: float = 0.45
    importance_scale: float = 3.0  # importance / 3 maps 1..5 to 0.33..1.67
    # The weight is (importance / scale) ** importance_power: 1 is seed 001's formula, 0 leaves
    # importance out (rule-given importance is a prior about the item, not about the question).
    importance_power: float = 1.0
    default_importance: int = 3  # items without one (chunks) weigh 1.0
    # Recency: 1.0 up to `fresh_days`, then linear down to `stale_weight` at `stale_days`.
    fresh_days: float = 7.0
    stale_days: float = 90.0
    stale_weight: float = 0.5

    def __post_init__(self) -> None:
        if not 0 <= self.fresh_days < self.stale_days or self.importance_scale <= 0 or self.importance_power < 0:
            raise ValueError("need 0 <= fresh_days < stale_days, importance_scale > 0 and importance_power >= 0")


@dataclass(frozen=True)
class Candidate:
    """One retrievable item. `timestamp` is the event time recency is measured from (when its
    source happened, or a fact was last refreshed by a merge); `occurred_start`/`occurred_end`
    (unix seconds) are the dates shown on its line."""

    item_id: str
    kind: Kind
    content: str
    similarity: float
    timestamp: float
    importance: int | None = None
    category: str | None = None  # fact category or memory_type
    visibility: str | None = None  # facts: "private" or "shared"
    range_start: int | None = None  # chunks: first seq
    range_end: int | None = None  # chunks: end seq, EXCLUSIVE
    occurred_start: float | None = None
    occurred_end: float | None = None
    role: str | None = None  # messages


def frozen_maker(cls: type) -> Callable[..., Any]:
    """A constructor of the frozen dataclass `cls` from every field's value, in order, that fills
    the instance's __dict__ instead of running the dataclass's __init__ (an object.__setattr__ a
    field: a 13-field Candidate ~1.9 µs against ~0.8, a 28-field SearchRow ~4.2 against ~1.5;
    "Eleventh round" in docs/retrieval.md). The instance is the same: equal, frozen. Only for a
    class without __post_init__, called with every field."""
    names, new = tuple(f.name for f in fields(cls)), object.__new__

    def make(*values: Any) -> Any:
        made = new(cls)
        made.__dict__.update(zip(names, values))
        return made

    return make


candidate_of = frozen_maker(Candidate)


@dataclass(frozen=True)
class ScoreBreakdown:
    similarity: float
    importance_weight: float
    recency_weight: float
    final: float


@dataclass(frozen=True)
class ScoredItem:
    candidate: Candidate
    score: ScoreBreakdown


@dataclass(frozen=True)
class Exclusion:
    candidate: Candidate
    reason: Reason
    score: ScoreBreakdown | None = None
    tokens: int | None = None  # packing: the rendered line's size
    line: str | None = None  # packing: the rendered line, when its size was not counted (packing.exclusion_tokens)


@dataclass(frozen=True)
class ScoringResult:
    kept: tuple[ScoredItem, ...]  # above threshold, best first
    excluded: tuple[Exclusion, ...]


def importance_weight(importance: int | None, config: ScoringConfig = ScoringConfig()) -> float:
    value = config.default_importance if importance is None else max(1, min(5, importance))
    return (value / config.importance_scale) ** config.importance_power


def length_weight(distinct_lexemes: int, typical: int, power: float) -> float:
    """How much of an item's keyword coverage counts: 1 for an item of at most `typical`
    distinct lexemes, (typical / lexemes) ** power for a longer one. A long text contains any
    query word by chance in proportion to its length (BM25 normalises its term frequencies for
    the same reason): a chunk of ~80 lexemes that covers a question's words spread over ten
    messages is not as much about the question as one message that covers them (issue 24,
    docs/evaluation.md). `typical` 0: off."""
    if typical <= 0 or distinct_lexemes <= typical:
        return 1.0
    return (typical / distinct_lexemes) ** power


def recency_weight(age_s: float, config: ScoringConfig = ScoringConfig()) -> float:
    """1.0 for age <= fresh_days, stale_weight for age >= stale_days, linear in between.
    A negative age (clock skew) counts as brand new."""
    days = max(0.0, age_s) / DAY_S
    if days <= config.fresh_days:
        return 1.0
    if days >= config.stale_days:
        return config.stale_weight
    progress = (days - config.fresh_days) / (config.stale_days - config.fresh_days)
    return 1.0 - progress * (1.0 - config.stale_weight)


def score(candidate: Candidate, now: float, config: ScoringConfig = ScoringConfig()) -> ScoreBreakdown:
    imp = importance_weight(candidate.importance, config)
    rec = recency_weight(now - candidate.timestamp, config)
    return ScoreBreakdown(candidate.similarity, imp, rec, candidate.similarity * imp * rec)


def still_visible(surfaced_seqs: Sequence[int | None] | None, turn_seq: int, window_seqs: int) -> bool:
    """Seed 001 skips what was already surfaced, to avoid repetition: an item shown at an
    earlier turn of this conversation within the last `window_seqs` messages is still in what
    the chat model sees; older ones are not. Showing it at this very turn does not count (a
    retry, or another question at the same point, ranks as the first did)."""
    return any(s is not None and turn_seq - window_seqs <= s < turn_seq for s in surfaced_seqs or ())


def rank_key(item: ScoredItem) -> tuple[float, float, str]:
    """Best first: final score, then similarity, then id (deterministic ties)."""
    return -item.score.final, -item.score.similarity, item.candidate.item_id


def score_candidates(candidates: Iterable[Candidate], now: float, surfaced_ids: Collection[str] = (),
                     config: ScoringConfig = ScoringConfig()) -> ScoringResult:
    """Score every candidate; drop those already surfaced in this conversation and those not
    above the threshold, saying why. A repeated item_id keeps its best-scoring copy."""
    best: dict[str, ScoredItem] = {}
    excluded: list[Exclusion] = []
    for candidate in candidates:
        item = ScoredItem(candidate, score(candidate, now, config))
        if candidate.item_id in surfaced_ids:
            excluded.append(Exclusion(candidate, "already_surfaced", item.score))
        elif item.score.final <= config.threshold:
            excluded.append(Exclusion(candidate, "below_threshold", item.score))
        elif candidate.item_id not in best or rank_key(item) < rank_key(best[candidate.item_id]):
            best[candidate.item_id] = item
    return ScoringResult(tuple(sorted(best.values(), key=rank_key)), tuple(excluded))

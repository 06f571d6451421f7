"""Seed 001's relevance formula: similarity x importance/3 x recency, threshold 0.45."""

from __future__ import annotations

import pytest

from retrieval.scoring import (
    DAY_S,
    Candidate,
    ScoreBreakdown,
    ScoringConfig,
    importance_weight,
    recency_weight,
    score,
    score_candidates,
)

NOW = 1_800_000_000.0


def fact(item_id: str, similarity: float, importance: int | None = 3, age_days: float = 0.0) -> Candidate:
    return Candidate(item_id, "fact", f"content {item_id}", similarity, NOW - age_days * DAY_S, importance)


@pytest.mark.parametrize(
    ("similarity", "importance", "age_days", "expected"),
    [(0.9, 5, 3, 0.9 * 5 / 3 * 1.0),  # = 1.5
     (0.9, 3, 200, 0.9 * 1.0 * 0.5),  # stale: x0.5
     (0.6, 1, 0, 0.6 / 3),
     (0.6, None, 0, 0.6),  # chunks have no importance: weight 1.0
     (0.8, 3, 7, 0.8),  # still fresh at exactly 7 days
     (0.8, 3, 48.5, 0.8 * 0.75),  # halfway between 7 and 90 days
     (0.8, 3, 90, 0.8 * 0.5)],
)
def test_formula_matches_seed_001(similarity, importance, age_days, expected):
    result = score(fact("x", similarity, importance, age_days), NOW)
    assert result.final == pytest.approx(expected)
    assert result.final == pytest.approx(result.similarity * result.importance_weight * result.recency_weight)


def test_worked_example_breakdown():
    result = score(fact("x", 0.9, 5, 3), NOW)
    assert result == ScoreBreakdown(0.9, pytest.approx(5 / 3), 1.0, pytest.approx(1.5))


@pytest.mark.parametrize(("importance", "weight"), [(1, 1 / 3), (3, 1.0), (5, 5 / 3), (0, 1 / 3), (9, 5 / 3)])
def test_importance_weight_is_clamped_to_the_1_to_5_scale(importance, weight):
    assert importance_weight(importance) == pytest.approx(weight)


@pytest.mark.parametrize(("days", "weight"), [(-2, 1.0), (0, 1.0), (6.99, 1.0), (7, 1.0), (90, 0.5),
                                              (365, 0.5), (7 + 83 / 4, 0.875)])
def test_recency_weight_is_linear_between_7_and_90_days(days, weight):
    assert recency_weight(days * DAY_S) == pytest.approx(weight)


@pytest.mark.parametrize(("power", "low", "high"), [(1.0, 1 / 3, 5 / 3), (0.5, (1 / 3) ** 0.5, (5 / 3) ** 0.5),
                                                   (0.0, 1.0, 1.0)])
def test_the_importance_power_flattens_the_weight_and_zero_leaves_importance_out(power, low, high):
    config = ScoringConfig(threshold=0.0, importance_power=power)
    assert (importance_weight(1, config), importance_weight(5, config)) == (pytest.approx(low), pytest.approx(high))
    # at 0 a passing remark (importance 1) ranks by its similarity, as a life event (5) does
    ranked = score_candidates([fact("event", 0.5, 5), fact("remark", 0.6, 1)], NOW, config=config).kept
    assert [i.candidate.item_id for i in ranked] == (["remark", "event"] if power == 0 else ["event", "remark"])
    with pytest.raises(ValueError):
        ScoringConfig(importance_power=-1)


def test_recency_is_configurable():
    config = ScoringConfig(fresh_days=1, stale_days=11, stale_weight=0.0)
    assert recency_weight(6 * DAY_S, config) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        ScoringConfig(fresh_days=10, stale_days=5)


def test_threshold_is_strict_and_exclusions_say_why():
    candidates = [fact("above", 0.46), fact("equal", 0.45), fact("below", 0.3),
                  fact("seen", 0.99), fact("best", 0.9, 5)]
    result = score_candidates(candidates, NOW, surfaced_ids={"seen"})
    assert [item.candidate.item_id for item in result.kept] == ["best", "above"]
    assert {(e.candidate.item_id, e.reason) for e in result.excluded} == {
        ("equal", "below_threshold"), ("below", "below_threshold"), ("seen", "already_surfaced")}
    assert all(e.score is not None for e in result.excluded)


def test_ranking_ties_are_deterministic_and_duplicates_keep_the_best_copy():
    result = score_candidates([fact("b", 0.7), fact("a", 0.7), fact("a", 0.8)], NOW)
    assert [(i.candidate.item_id, i.score.similarity) for i in result.kept] == [("a", 0.8), ("b", 0.7)]


def test_threshold_is_configurable():
    result = score_candidates([fact("x", 0.3)], NOW, config=ScoringConfig(threshold=0.2))
    assert len(result.kept) == 1

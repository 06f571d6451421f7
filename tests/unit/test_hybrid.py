"""Hybrid fusion of vector and keyword hits: RRF (k=60) and weighted sum, deduplicated."""

from __future__ import annotations

import pytest

from retrieval.hybrid import FusedHit, Hit, HybridConfig, fuse, fuse_rrf, fuse_weighted

VECTOR = [Hit("a", 0.91), Hit("b", 0.80), Hit("c", 0.62)]
KEYWORD = [Hit("c", 0.30), Hit("d", 0.20, similarity=0.41), Hit("a", 0.10)]


def test_rrf_scores_and_order():
    fused = fuse_rrf(VECTOR, KEYWORD)
    assert [f.item_id for f in fused] == ["a", "c", "b", "d"]
    by_id = {f.item_id: f for f in fused}
    assert by_id["a"].fused_score == pytest.approx(1 / 61 + 1 / 63)
    assert by_id["c"].fused_score == pytest.approx(1 / 63 + 1 / 61)  # tie with "a": higher similarity first
    assert by_id["b"].fused_score == pytest.approx(1 / 62)
    assert by_id["d"] == FusedHit("d", pytest.approx(1 / 62), 0.41, None, 2, 0.20)


def test_item_found_in_both_lists_beats_one_found_in_either():
    fused = fuse_rrf([Hit("x", 0.9), Hit("both", 0.5)], [Hit("y", 5.0), Hit("both", 1.0)])
    assert fused[0].item_id == "both"


def test_duplicates_are_merged_keeping_the_best_rank_and_similarity():
    fused = fuse_rrf([Hit("a", 0.5), Hit("a", 0.9), Hit("b", 0.7)], [Hit("a", 1.0, similarity=0.95)])
    assert len(fused) == 2
    a = next(f for f in fused if f.item_id == "a")
    assert (a.vector_rank, a.keyword_rank, a.similarity) == (1, 1, 0.95)


def test_input_order_does_not_matter():
    assert fuse_rrf(list(reversed(VECTOR)), list(reversed(KEYWORD))) == fuse_rrf(VECTOR, KEYWORD)


def test_weighted_sum_normalises_keyword_scores_by_the_best_one():
    fused = fuse_weighted(VECTOR, KEYWORD, vector_weight=0.5, keyword_weight=0.5)
    by_id = {f.item_id: f.fused_score for f in fused}
    assert by_id["c"] == pytest.approx(0.5 * 0.62 + 0.5 * 1.0)
    assert by_id["d"] == pytest.approx(0.5 * 0.20 / 0.30)
    assert [f.item_id for f in fused] == ["c", "a", "b", "d"]


def test_keyword_only_hits_without_similarity_and_limits():
    fused = fuse([], [Hit("k", 2.0)], HybridConfig(limit=5))
    assert fused == (FusedHit("k", pytest.approx(1 / 61), None, None, 1, 2.0),)
    assert len(fuse(VECTOR, KEYWORD, HybridConfig(limit=2))) == 2
    assert fuse([], []) == ()

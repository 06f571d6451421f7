"""Turn-start retrieval (seed 001): hybrid fusion, relevance scoring, token-budget packing."""

from retrieval.hybrid import FusedHit, Hit, HybridConfig, fuse, fuse_rrf, fuse_weighted
from retrieval.packing import DEFAULT_BUDGET_TOKENS, Packed, PackedItem, pack, render_line
from retrieval.scoring import (
    Candidate,
    Exclusion,
    ScoreBreakdown,
    ScoredItem,
    ScoringConfig,
    ScoringResult,
    importance_weight,
    rank_key,
    recency_weight,
    score,
    score_candidates,
)
from retrieval.tokens import TokenCounter, TokenizerUnavailable, count_tokens, load_tokenizer, tokenizer_path

__all__ = [
    "DEFAULT_BUDGET_TOKENS", "Candidate", "Exclusion", "FusedHit", "Hit", "HybridConfig", "Packed",
    "PackedItem", "ScoreBreakdown", "ScoredItem", "ScoringConfig", "ScoringResult", "TokenCounter",
    "TokenizerUnavailable", "count_tokens", "fuse", "fuse_rrf", "fuse_weighted", "importance_weight",
    "load_tokenizer", "pack", "rank_key", "recency_weight", "render_line", "score", "score_candidates",
    "tokenizer_path",
]

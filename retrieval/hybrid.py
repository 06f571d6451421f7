"""Fuse vector and keyword (full-text) hits: reciprocal rank fusion or a weighted sum."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

Method = Literal["rrf", "weighted"]


@dataclass(frozen=True)
class HybridConfig:
    method: Method = "rrf"
    rrf_k: int = 60  # the usual RRF constant: 1 / (k + rank), rank starting at 1
    vector_weight: float = 0.7  # weighted: w_v * similarity + w_k * keyword_score / best keyword score
    keyword_weight: float = 0.3
    limit: int | None = None


@dataclass(frozen=True)
class Hit:
    """One result row. Vector hits: `score` is the cosine similarity. Keyword hits: `score` is
    the full-text rank (e.g. ts_rank) and `similarity` the cosine if the query computed it."""

    item_id: str
    score: float
    similarity: float | None = None


@dataclass(frozen=True)
class FusedHit:
    item_id: str
    fused_score: float
    similarity: float | None  # best cosine seen for the item; None: keyword-only, not computed
    vector_rank: int | None = None  # 1-based, best rank in the vector list
    keyword_rank: int | None = None
    keyword_score: float | None = None


def _best(hits: Sequence[Hit], is_vector: bool) -> dict[str, tuple[int, float, float | None]]:
    """item_id -> (best 1-based rank, best score, best similarity); lists arrive best first,
    but are re-sorted by score so a caller's order never matters."""
    ordered = sorted(hits, key=lambda h: (-h.score, h.item_id))
    best: dict[str, tuple[int, float, float | None]] = {}
    for rank, hit in enumerate(ordered, start=1):
        similarity = hit.score if is_vector and hit.similarity is None else hit.similarity
        if hit.item_id in best:
            old_rank, old_score, old_sim = best[hit.item_id]
            sims = [s for s in (old_sim, similarity) if s is not None]
            best[hit.item_id] = (old_rank, old_score, max(sims) if sims else None)
        else:
            best[hit.item_id] = (rank, hit.score, similarity)
    return best


def fuse(vector_hits: Sequence[Hit], keyword_hits: Sequence[Hit],
         config: HybridConfig = HybridConfig()) -> tuple[FusedHit, ...]:
    """Deduplicated by item id, best first (fused score, then similarity, then id)."""
    vec, kw = _best(vector_hits, True), _best(keyword_hits, False)
    top_keyword = max((score for _, score, _ in kw.values()), default=0.0)
    fused: list[FusedHit] = []
    for item_id in vec.keys() | kw.keys():
        v, k = vec.get(item_id), kw.get(item_id)
        if config.method == "rrf":
            value = sum(1.0 / (config.rrf_k + hit[0]) for hit in (v, k) if hit is not None)
        else:
            value = (config.vector_weight * (v[1] if v else 0.0)
                     + config.keyword_weight * (k[1] / top_keyword if k and top_keyword > 0 else 0.0))
        sims = [hit[2] for hit in (v, k) if hit is not None and hit[2] is not None]
        fused.append(FusedHit(item_id, value, max(sims) if sims else None,
                              v[0] if v else None, k[0] if k else None, k[1] if k else None))
    fused.sort(key=lambda f: (-f.fused_score, -(f.similarity if f.similarity is not None else -1.0),
                              f.item_id))
    return tuple(fused[:config.limit] if config.limit is not None else fused)


def fuse_rrf(vector_hits: Sequence[Hit], keyword_hits: Sequence[Hit], k: int = 60) -> tuple[FusedHit, ...]:
    return fuse(vector_hits, keyword_hits, HybridConfig(method="rrf", rrf_k=k))


def fuse_weighted(vector_hits: Sequence[Hit], keyword_hits: Sequence[Hit], vector_weight: float = 0.7,
                  keyword_weight: float = 0.3) -> tuple[FusedHit, ...]:
    return fuse(vector_hits, keyword_hits, HybridConfig("weighted", vector_weight=vector_weight,
                                                        keyword_weight=keyword_weight))

"""Retrieved facts, chunks and messages for the turn-start context, with the scores that put them there."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Literal, Sequence

import psycopg
from pydantic import BaseModel, Field

from api.deps import side_connections
from retrieval.request import ContextRequest
from core.embeddings import EmbeddingError
from retrieval.scoring import ScoreBreakdown
from retrieval.items import Prepared
from retrieval.search import SearchRow
from retrieval.packing import exclusion_tokens
from retrieval.service import Retrieval, RetrievalConfig, common_lexemes_for, embedder_for, line_tokens, retrieve

log = logging.getLogger(__name__)
MAX_EXCLUDED = 20  # the best-scoring ones; `excluded_total` counts them all


class ScoreOut(BaseModel):
    """Seed 001: final = similarity x importance_weight x recency_weight."""

    similarity: float = Field(description="cosine + keyword_weight x keyword_score (x a length weight for an item of"
                              " many words; hybrid relevance)")
    importance_weight: float
    recency_weight: float
    final: float
    cosine: float
    keyword_score: float = Field(description="IDF-weighted share of the query's words the item contains (0..1;"
                                 " a question shown with its reply: the words either holds)")
    found_by: list[Literal["vector", "keyword"]]


class RetrievedItemOut(BaseModel):
    kind: Literal["fact", "chunk", "message"]
    id: str
    content: str
    line: str = Field(description="The line to put in the prompt")
    category: str | None = None
    memory_type: str | None = None
    visibility: Literal["private", "shared"] | None = None
    owner_user_id: str | None = None
    importance: int | None = None
    conversation_id: str | None = None
    message_range: tuple[int, int] | None = Field(None, description="chunks and messages: [start, end) seqs")
    occurred_start: datetime | None = Field(None, description="When its source happened (first message)")
    occurred_end: datetime | None = Field(None, description="When its source happened (last message)")
    role: str | None = Field(None, description="messages: who said it")
    score: ScoreOut
    tokens: int


class ExcludedOut(BaseModel):
    kind: Literal["fact", "chunk", "message"]
    id: str
    reason: Literal["below_threshold", "already_surfaced", "over_budget", "duplicate"] = Field(
        description="duplicate: its information is already in an included item (a fact and its message)")
    score: ScoreOut | None = None
    tokens: int | None = None


class RetrievedOut(BaseModel):
    items: list[RetrievedItemOut] = Field(description="Included, best first, within budget_tokens")
    text: str = Field(description="The included lines joined by newlines: what to prepend")
    excluded: list[ExcludedOut] = Field(description=f"Why other candidates were left out (best {MAX_EXCLUDED})")
    excluded_total: int
    candidates: int = Field(description="Distinct items the searches returned")
    tokens_used: int
    budget_tokens: int
    threshold: float
    query: str = Field(description="The text that was embedded and searched")
    embedding_model: str
    turn_seq: int | None = Field(None, description="The turn ranked for: before_seq, or the next seq")
    turn_time: datetime | None = Field(None, description="When that turn happened: recency is measured from it")
    error: str | None = Field(None, description="Set when retrieval could not run (e.g. embedder down)")


def _score(breakdown: ScoreBreakdown, row: SearchRow) -> ScoreOut:
    found = [name for name, hit in (("vector", row.in_vector), ("keyword", row.in_keyword)) if hit]
    return ScoreOut(similarity=breakdown.similarity, importance_weight=breakdown.importance_weight,
                    recency_weight=breakdown.recency_weight, final=breakdown.final, cosine=row.cosine,
                    keyword_score=row.keyword_score, found_by=found)


def to_out(result: Retrieval, threshold: float) -> RetrievedOut:
    items = []
    for packed in result.packed.included:
        row = result.rows[packed.item.candidate.item_id]
        items.append(RetrievedItemOut(
            kind=row.kind, id=row.item_id, content=row.content, line=packed.line, category=row.category,
            memory_type=row.memory_type, visibility=row.visibility, owner_user_id=row.owner_user_id,
            importance=row.importance, conversation_id=row.conversation_id,
            message_range=(row.range_start, row.range_end) if row.kind != "fact" else None,
            occurred_start=row.occurred_start, occurred_end=row.occurred_end, role=row.role,
            score=_score(packed.item.score, row), tokens=packed.tokens))
    excluded = sorted(result.packed.excluded, key=lambda e: -(e.score.final if e.score else 0.0))
    return RetrievedOut(
        items=items, text=result.packed.text,
        excluded=[ExcludedOut(kind=result.rows[e.candidate.item_id].kind, id=result.rows[e.candidate.item_id].item_id,
                              reason=e.reason, tokens=exclusion_tokens(e, line_tokens),
                              score=_score(e.score, result.rows[e.candidate.item_id]) if e.score else None)
                  for e in excluded[:MAX_EXCLUDED]],
        excluded_total=len(excluded), candidates=result.candidates, tokens_used=result.packed.tokens_used,
        budget_tokens=result.packed.budget, threshold=threshold, query=result.query,
        embedding_model=result.embedding_model, turn_seq=result.turn_seq, turn_time=result.turn_time)


async def retrieval_section(conn: psycopg.AsyncConnection, request: ContextRequest, app_state: Any, *,
                            verbatim_from_seq: int | None = None,
                            recent: Sequence[tuple[str, datetime]] | None = None,
                            prepared: Prepared | None = None, then_commit: bool = False) -> Any | None:
    """RetrievedOut, or None when there is nothing to search with (no query, no messages).
    Messages of this conversation from `verbatim_from_seq` on (the response's verbatim gap)
    are never retrieved; `recent`: the newest messages before the turn, if read already
    (retrieval.service.turn_from); `prepared`, `then_commit`: see retrieval.service.retrieve.
    If anything fails (the embedder, a query), the context
    still answers: no items, and `error` says why."""
    config = RetrievalConfig.from_settings(app_state.settings.retrieval)
    embedder = embedder_for(app_state)
    try:
        result = await retrieve(conn, request, embedder, config, common=common_lexemes_for(app_state),
                                verbatim_from_seq=verbatim_from_seq, recent=recent, side=side_connections(app_state),
                                prepared=prepared, then_commit=then_commit)
    except Exception as error:  # noqa: BLE001 - a section degrades, the context answers
        if isinstance(error, EmbeddingError):
            log.warning("retrieval skipped, embedder failed: %s", error)
        else:
            log.exception("retrieval failed")
        await conn.rollback()  # a failed statement aborts the transaction the next section needs
        return RetrievedOut(items=[], text="", excluded=[], excluded_total=0, candidates=0, tokens_used=0,
                            budget_tokens=request.budget_tokens, threshold=config.scoring.threshold,
                            query=request.query or "", embedding_model=embedder.model,
                            error=f"{type(error).__name__}: {error}")
    return None if result is None else to_out(result, config.scoring.threshold)

"""Turn-start retrieval: query text, hybrid search, seed 001's score, skip surfaced, pack, record."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import psycopg

from api.sections.request import ContextRequest
from memory_agent.embeddings import Embedder, make_embedder
from memory_agent.settings import RetrievalSettings
from retrieval.packing import Packed, pack, render_line
from retrieval.scoring import Candidate, ScoredItem, ScoringConfig, rank_key, score, score_candidates
from retrieval.search import CommonLexemes, Scope, SearchRow, prepare, record_surfaced, search_all
from retrieval.tokens import load_tokenizer

Method = Literal["hybrid", "vector", "keyword"]


@dataclass(frozen=True)
class RetrievalConfig:
    scoring: ScoringConfig = ScoringConfig()
    candidate_k: int = 20
    last_messages: int = 3
    context_message_chars: int = 200
    query_chars: int = 500
    keyword_max_terms: int = 32
    keyword_max_doc_fraction: float = 0.05
    keyword_weight: float = 1.0
    ef_search: int = 64
    method: Method = "hybrid"

    @classmethod
    def from_settings(cls, s: RetrievalSettings, method: Method = "hybrid") -> "RetrievalConfig":
        scoring = ScoringConfig(threshold=s.threshold, importance_scale=s.importance_scale,
                                fresh_days=s.fresh_days, stale_days=s.stale_days, stale_weight=s.stale_weight)
        return cls(scoring, s.candidate_k, s.last_messages, s.context_message_chars, s.query_chars,
                   s.keyword_max_terms, s.keyword_max_doc_fraction, s.keyword_weight,
                   max(s.ef_search, s.candidate_k), method)


@dataclass(frozen=True)
class Retrieval:
    query: str
    embedding_model: str
    packed: Packed
    rows: Mapping[str, SearchRow]  # by candidate key ("fact:<id>" / "chunk:<id>")
    candidates: int  # distinct items the searches returned


def query_text(current: str | None, earlier: Sequence[str], config: RetrievalConfig = RetrievalConfig()) -> str | None:
    """The current message first, then the earlier ones newest first, each cut to a few hundred
    characters, so the embedder's truncation drops the oldest context, never the question."""
    seen: set[str] = set()
    parts: list[str] = []
    for text, limit in [(current or "", config.query_chars)] + [(m, config.context_message_chars)
                                                              for m in reversed(earlier)]:
        text = " ".join(text.split())
        if text and text not in seen:  # e.g. the current message, already in the log
            seen.add(text)
            parts.append(text[:limit])
    return "\n".join(parts) if parts else None


def relevance(row: SearchRow, method: Method, keyword_weight: float) -> float:
    """The `similarity` of seed 001's formula. vector: the cosine; keyword: ts_rank;
    hybrid: the cosine plus a bonus for matching the query's words (ts_rank x weight)."""
    if method == "vector":
        return row.cosine
    if method == "keyword":
        return row.keyword_score
    return row.cosine + keyword_weight * row.keyword_score


def key(kind: str, item_id: str) -> str:
    return f"{kind}:{item_id}"


def to_candidates(rows: Sequence[SearchRow], config: RetrievalConfig) -> list[Candidate]:
    return [
        Candidate(key(r.kind, r.item_id), r.kind, r.content, relevance(r, config.method, config.keyword_weight),
                  r.timestamp.timestamp(), r.importance, r.category, r.visibility, r.range_start, r.range_end)
        for r in rows
    ]


def rank_all(rows: Sequence[SearchRow], now: float, config: RetrievalConfig = RetrievalConfig()) -> list[ScoredItem]:
    """Every candidate scored and ordered best first, ignoring threshold and surfaced flags
    (what recall@k is measured on)."""
    items = [ScoredItem(c, score(c, now, config.scoring)) for c in to_candidates(rows, config)]
    return sorted(items, key=rank_key)


async def earlier_messages(conn: psycopg.AsyncConnection, request: ContextRequest, n: int) -> list[str]:
    """The conversation's last `n` messages before `before_seq`, oldest first."""
    if n <= 0:
        return []
    cur = await conn.execute(
        "SELECT content FROM messages WHERE tenant_id = %s AND conversation_id = %s"
        " AND (%s::int IS NULL OR seq < %s::int) ORDER BY seq DESC LIMIT %s",
        (request.tenant_id, request.conversation.conversation_id, request.before_seq, request.before_seq, n),
    )
    return [row[0] for row in reversed(await cur.fetchall())]


def scope_of(request: ContextRequest) -> Scope:
    return Scope(request.tenant_id, request.user_id, request.subject_id, request.conversation.conversation_id)


_LINE_TOKENS: dict[str, int] = {}  # a process-wide cache of a pure function, bounded below


def remember_tokens(lines: Sequence[str]) -> None:
    """Count the lines not yet cached in one batch call of the tokenizer."""
    missing = [line for line in dict.fromkeys(lines) if line not in _LINE_TOKENS]
    if missing:
        if len(_LINE_TOKENS) + len(missing) > 8192:
            _LINE_TOKENS.clear()
        for line, encoding in zip(missing, load_tokenizer().encode_batch(missing, add_special_tokens=False)):
            _LINE_TOKENS[line] = len(encoding.ids)


def count_lines(text: str) -> int:
    """count_tokens, line by line with a cache: exact for the WordPiece tokenizer (a newline is
    whitespace and no token spans it), and pack() re-counts the joined text at every step."""
    lines = text.split("\n")
    remember_tokens(lines)
    return sum(_LINE_TOKENS[line] for line in lines)


async def search_rows(conn: psycopg.AsyncConnection, scope: Scope, text: str, embedder: Embedder,
                      config: RetrievalConfig, keyword_text: str | None = None,
                      common: CommonLexemes | None = None) -> list[SearchRow]:
    """One query embedding of `text`, then per table one statement holding both index searches;
    the keyword search uses `keyword_text` (default: `text`) minus the tables' common lexemes
    (`common`: a cache; None reads the statistics now)."""
    vector = await embedder.embed_query(text)
    common = common or CommonLexemes(config.keyword_max_doc_fraction)
    keywords = await prepare(conn, config.ef_search, keyword_text if keyword_text is not None else text,
                             await common.get(conn, time.monotonic()), config.keyword_max_terms)
    return await search_all(conn, scope, vector, keywords, config.candidate_k,
                            use_vector=config.method != "keyword", use_keyword=config.method != "vector")


async def retrieve(conn: psycopg.AsyncConnection, request: ContextRequest, embedder: Embedder,
                   config: RetrievalConfig = RetrievalConfig(), *, common: CommonLexemes | None = None,
                   record: bool = True) -> Retrieval | None:
    """None when there is nothing to search with (no query, no earlier messages). Included
    items are recorded as surfaced for the conversation and their access counts bumped,
    then committed (`record=False` leaves the database untouched)."""
    earlier = await earlier_messages(conn, request, config.last_messages)
    text = query_text(request.query, earlier, config)
    if text is None:
        return None
    scope = scope_of(request)
    # Keywords come from the current message alone when there is one: the earlier turns
    # add context to the embedding, but their small talk would match half the table.
    current = request.query if request.query and request.query.strip() else None
    rows = await search_rows(conn, scope, text, embedder, config, current, common)
    by_key = {key(r.kind, r.item_id): r for r in rows}
    surfaced = {k for k, r in by_key.items() if r.surfaced}
    now = request.now.timestamp()
    scored = score_candidates(to_candidates(rows, config), now, surfaced, config.scoring)
    remember_tokens([render_line(item) for item in scored.kept])
    packed = pack(scored.kept, request.budget_tokens, count_lines, scored.excluded)
    if record and packed.included:
        chosen = [(by_key[p.item.candidate.item_id].kind, by_key[p.item.candidate.item_id].item_id)
                  for p in packed.included]
        await record_surfaced(conn, scope, chosen, request.now)
        await conn.commit()
    return Retrieval(text, embedder.model, packed, by_key, len(by_key))


def embedder_for(app_state: Any) -> Embedder:
    """One embedder per app, made on first use (the local model loads on its first call)."""
    embedder = getattr(app_state, "retrieval_embedder", None)
    if embedder is None:
        embedder = make_embedder(app_state.settings)
        app_state.retrieval_embedder = embedder
    return embedder


def common_lexemes_for(app_state: Any) -> CommonLexemes:
    common = getattr(app_state, "retrieval_common_lexemes", None)
    if common is None:
        common = CommonLexemes(app_state.settings.retrieval.keyword_max_doc_fraction)
        app_state.retrieval_common_lexemes = common
    return common


async def warm_up(app_state: Any) -> None:
    """Load the model before the first request needs it (call from a startup hook)."""
    await embedder_for(app_state).embed_query("warm up")

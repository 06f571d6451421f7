"""Memory search outside any conversation (GET /v1/search, the CLI, the MCP tool).

The same searches and the same seed 001 score as the turn-start context (retrieval/service.py),
without what belongs to a conversation: no surfaced-item skip and nothing written (no surfaced
rows, no access-count bumps). The query is the text as given; recency is measured from now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

import numpy as np
import psycopg

from core.embeddings import Embedder
from retrieval.packing import pack, render_line
from retrieval.scoring import score_candidates
from retrieval.search import KINDS, NO_SEQ, CommonLexemes, Kind, Scope, SearchRow
from retrieval.service import Retrieval, RetrievalConfig, count_lines, key, remember_tokens, search_rows, to_candidates

# No conversation: the scope's conversation id matches none (identifiers never start with '#'),
# so no item is flagged surfaced and the messages searched are the user's, in every conversation.
NO_CONVERSATION = "#search"
# A search returns its k best; no prompt budget applies (each item still says its tokens).
UNBOUNDED_TOKENS = 1_000_000
MAX_SUBJECTS = 50


@dataclass(frozen=True)
class SearchRequest:
    tenant_id: str
    user_id: str
    query: str
    # None: every subject the user has memory about (and memory about no subject).
    subject_ids: Sequence[str | None]
    kinds: Sequence[Kind] = KINDS
    since: datetime | None = None
    until: datetime | None = None
    k: int = 10


class _OnceEmbedder:
    """The query embedded once, however many subjects are searched with it."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner, self.model = embedder, embedder.model
        self._vectors: dict[str, np.ndarray] = {}

    async def embed_query(self, text: str) -> np.ndarray:
        if text not in self._vectors:
            self._vectors[text] = await self.inner.embed_query(text)
        return self._vectors[text]


async def user_subjects(conn: psycopg.AsyncConnection, tenant_id: str, user_id: str) -> list[str | None]:
    """The subjects the user has memory about: None first, then the named ones (at most MAX_SUBJECTS)."""
    cur = await conn.execute(
        "SELECT DISTINCT subject_id FROM (SELECT subject_id FROM conversations WHERE tenant_id = %(t)s"
        " AND user_id = %(u)s AND subject_id IS NOT NULL UNION SELECT subject_id FROM facts WHERE tenant_id = %(t)s"
        " AND owner_user_id = %(u)s AND subject_id IS NOT NULL) s ORDER BY subject_id LIMIT %(n)s",
        {"t": tenant_id, "u": user_id, "n": MAX_SUBJECTS},
    )
    return [None, *(row[0] for row in await cur.fetchall())]


def _in_window(row: SearchRow, since: datetime | None, until: datetime | None) -> bool:
    """Kept when the time its source happened overlaps [since, until]."""
    start = row.occurred_start or row.timestamp
    end = row.occurred_end or row.timestamp
    return (since is None or end >= since) and (until is None or start <= until)


async def search_memory(conn: psycopg.AsyncConnection, request: SearchRequest, embedder: Embedder,
                        config: RetrievalConfig, now: datetime, *, common: CommonLexemes | None = None
                        ) -> tuple[Retrieval, int]:
    """The k best items above the threshold (scored as in the context) and the number of items
    above it; the excluded ones are those under the threshold. Reads only."""
    once = _OnceEmbedder(embedder)
    k = max(config.candidate_k, min(config.max_candidate_k, 2 * request.k))
    rows: dict[str, SearchRow] = {}
    for subject in request.subject_ids:
        scope = Scope(request.tenant_id, request.user_id, subject, NO_CONVERSATION, NO_SEQ)
        for row in await search_rows(conn, scope, request.query, once, config, request.query, common, k):
            if row.kind in request.kinds and _in_window(row, request.since, request.until):
                rows.setdefault(key(row.kind, row.item_id), row)
    await conn.rollback()  # prepare() set transaction-local options: leave nothing behind
    ordered = list(rows.values())
    lexemes = sorted({lexeme for r in ordered for lexeme in (r.lexemes or ())})
    scored = score_candidates(to_candidates(ordered, config, lexemes), now.timestamp(), (), config.scoring)
    best = scored.kept[:request.k]
    remember_tokens([render_line(item) for item in best])
    below = tuple(e for e in scored.excluded if e.reason == "below_threshold")
    packed = pack(best, UNBOUNDED_TOKENS, count_lines, below)
    return Retrieval(request.query, embedder.model, packed, rows, len(rows), NO_SEQ, now), len(scored.kept)


__all__ = ["NO_CONVERSATION", "SearchRequest", "search_memory", "user_subjects"]

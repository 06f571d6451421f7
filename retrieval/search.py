"""Hybrid search SQL: pgvector HNSW kNN + full-text over facts and chunks, scoped by tenant, user and subject."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Collection, Literal, Sequence

import numpy as np
import psycopg
from psycopg.rows import class_row

Kind = Literal["fact", "chunk"]


@dataclass(frozen=True)
class Scope:
    tenant_id: str
    user_id: str
    subject_id: str | None
    conversation_id: str  # whose surfaced_items are flagged


@dataclass(frozen=True)
class SearchRow:
    """One candidate with both scores: every row has its cosine, and a keyword score
    (ts_rank, 0.0 when no query term matches), whichever search found it."""

    kind: Kind
    item_id: str
    content: str
    cosine: float
    keyword_score: float
    in_vector: bool  # returned by the vector search (its top k)
    in_keyword: bool  # returned by the keyword search (its top k)
    surfaced: bool  # already in surfaced_items for the scope's conversation
    timestamp: datetime  # facts: updated_at (merges refresh it); chunks: created_at
    importance: int | None = None
    category: str | None = None
    memory_type: str | None = None
    visibility: str | None = None
    owner_user_id: str | None = None
    conversation_id: str | None = None
    range_start: int | None = None
    range_end: int | None = None  # exclusive


def tsquery_text(lexemes: Sequence[str], common: Collection[str] = (), max_terms: int = 32) -> str | None:
    """The query's lexemes joined with | (any may match; ts_rank rewards matching more of them;
    an AND of a whole message would match nothing), minus those in `common`: a lexeme found in
    a large share of the table matches too many rows to rank quickly and says little about
    relevance (a stop list learnt from the data). Quoted for tsquery input; None if empty."""
    kept = [lexeme for lexeme in dict.fromkeys(lexemes) if lexeme and lexeme not in common][:max_terms]
    quoted = ("'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'" for lexeme in kept)
    return " | ".join(quoted) or None


def vector_literal(vector: np.ndarray) -> str:
    """pgvector's text form, so no per-connection type registration is needed."""
    return "[" + ",".join(f"{x:.7g}" for x in np.asarray(vector, dtype=np.float32).ravel()) + "]"


@dataclass(frozen=True)
class Keywords:
    """Per table, the tsquery text to search with (None: no keyword search)."""

    fact: str | None = None
    chunk: str | None = None


_COMMON = (
    "SELECT s.tablename, c.e FROM pg_stats s,"
    " unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS c(e, f)"
    " WHERE s.schemaname = current_schema() AND s.attname = 'content_tsv'"
    " AND s.tablename IN ('facts', 'conversation_chunks') AND c.e IS NOT NULL AND c.f > %s"
)


class CommonLexemes:
    """Per table, the lexemes found in more than `max_doc_fraction` of its rows, from ANALYZE's
    statistics (most_common_elems; none before the first ANALYZE), re-read every `ttl_s`.
    One per app: the statistics query costs more than the rest of `prepare`."""

    def __init__(self, max_doc_fraction: float, ttl_s: float = 60.0) -> None:
        self.max_doc_fraction, self.ttl_s = max_doc_fraction, ttl_s
        self._value: dict[str, frozenset[str]] | None = None
        self._expires = 0.0

    async def get(self, conn: psycopg.AsyncConnection, now: float) -> dict[str, frozenset[str]]:
        """`now`: a monotonic clock reading."""
        if self._value is None or now >= self._expires:
            found: dict[str, set[str]] = {"facts": set(), "conversation_chunks": set()}
            for table, lexeme in await (await conn.execute(_COMMON, (self.max_doc_fraction,))).fetchall():
                found[table].add(lexeme)
            self._value = {table: frozenset(lexemes) for table, lexemes in found.items()}
            self._expires = now + self.ttl_s
        return self._value


async def prepare(conn: psycopg.AsyncConnection, ef_search: int, keyword_text: str | None,
                  common: dict[str, frozenset[str]] | None = None, max_terms: int = 32) -> Keywords:
    """One round trip: the transaction-local HNSW breadth (an iterative scan keeps going while
    the scope filter rejects index hits, so a filtered kNN still returns k rows: pgvector 0.8)
    and the keyword text's English lexemes, minus each table's `common` ones."""
    cur = await conn.execute(
        "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true),"
        " ARRAY(SELECT u.lexeme FROM unnest(to_tsvector('english', %s)) u ORDER BY u.positions[1], u.lexeme)",
        (str(ef_search), keyword_text or ""),
    )
    lexemes = (await cur.fetchone())[2]
    common = common or {}
    return Keywords(tsquery_text(lexemes, common.get("facts", ()), max_terms),
                    tsquery_text(lexemes, common.get("conversation_chunks", ()), max_terms))


_FACT_COLUMNS = (
    "'fact' AS kind, t.fact_id AS item_id, t.content, t.updated_at AS timestamp, t.importance, t.category,"
    " t.memory_type, t.visibility, t.owner_user_id, t.source_conversation_id AS conversation_id,"
    " NULL::int AS range_start, NULL::int AS range_end"
)
_CHUNK_COLUMNS = (
    "'chunk' AS kind, t.chunk_id AS item_id, t.content, t.created_at AS timestamp, NULL::int AS importance,"
    " NULL AS category, NULL AS memory_type, NULL AS visibility, t.user_id AS owner_user_id, t.conversation_id,"
    " t.message_range_start AS range_start, t.message_range_end AS range_end"
)


def _fact_scope(subject_id: str | None) -> str:
    """Own current facts of this subject, plus facts shared by anyone about the same subject.
    Never another user's private fact, never deleted or superseded ones, never another tenant."""
    live = "t.tenant_id = %(tenant)s AND t.deleted_at IS NULL AND t.valid_to IS NULL"
    if subject_id is None:
        return f"{live} AND t.owner_user_id = %(user)s AND t.subject_id IS NULL"
    return f"{live} AND t.subject_id = %(subject)s AND (t.owner_user_id = %(user)s OR t.visibility = 'shared')"


def _chunk_scope(subject_id: str | None) -> str:
    subject = "t.subject_id IS NULL" if subject_id is None else "t.subject_id = %(subject)s"
    return f"t.tenant_id = %(tenant)s AND t.user_id = %(user)s AND {subject}"


def search_sql(kind: Kind, subject_id: str | None, *, vector: bool, keyword: bool) -> str:
    """One statement: the top k by cosine distance (HNSW), the top k by ts_rank (GIN), their
    union with both scores and the surfaced flag. A disabled search contributes nothing."""
    table, key, columns = (
        ("facts", "fact_id", _FACT_COLUMNS) if kind == "fact" else ("conversation_chunks", "chunk_id", _CHUNK_COLUMNS)
    )
    scope = _fact_scope(subject_id) if kind == "fact" else _chunk_scope(subject_id)
    tsquery = "%(keywords)s::tsquery"
    vec = (
        f"SELECT t.{key} AS id FROM {table} t WHERE {scope}"
        f" ORDER BY t.embedding <=> %(vector)s::vector LIMIT %(k)s"
        if vector else "SELECT NULL::text AS id WHERE false"
    )
    kw = (
        f"SELECT t.{key} AS id FROM {table} t WHERE {scope} AND t.content_tsv @@ {tsquery}"
        f" ORDER BY ts_rank(t.content_tsv, {tsquery}) DESC, t.{key} LIMIT %(k)s"
        if keyword else "SELECT NULL::text AS id WHERE false"
    )
    keyword_score = f"ts_rank(t.content_tsv, {tsquery})" if keyword else "0.0"
    matches = f"t.content_tsv @@ {tsquery}" if keyword else "false"
    return (
        f"WITH vec AS MATERIALIZED ({vec}), kw AS MATERIALIZED ({kw})"
        f" SELECT {columns},"
        f" 1 - (t.embedding <=> %(vector)s::vector) AS cosine,"
        f" CASE WHEN {matches} THEN {keyword_score} ELSE 0.0 END AS keyword_score,"
        f" t.{key} IN (SELECT id FROM vec) AS in_vector, t.{key} IN (SELECT id FROM kw) AS in_keyword,"
        f" EXISTS (SELECT 1 FROM surfaced_items s WHERE s.tenant_id = %(tenant)s"
        f" AND s.conversation_id = %(conversation)s AND s.item_kind = '{kind}' AND s.item_id = t.{key}) AS surfaced"
        f" FROM {table} t WHERE t.tenant_id = %(tenant)s"
        f" AND t.{key} IN (SELECT id FROM vec UNION SELECT id FROM kw)"
    )


async def search(
    conn: psycopg.AsyncConnection,
    kind: Kind,
    scope: Scope,
    vector: np.ndarray | str,
    keywords: str | None,
    k: int,
    *,
    use_vector: bool = True,
    use_keyword: bool = True,
) -> list[SearchRow]:
    """Candidates of one table, unordered (the caller ranks them). `keywords` is tsquery text
    (see tsquery_text); None turns the keyword search off."""
    literal = vector if isinstance(vector, str) else vector_literal(vector)
    sql = search_sql(kind, scope.subject_id, vector=use_vector, keyword=use_keyword and keywords is not None)
    params = {
        "tenant": scope.tenant_id, "user": scope.user_id, "subject": scope.subject_id,
        "conversation": scope.conversation_id, "vector": literal, "keywords": keywords or "", "k": k,
    }
    async with conn.cursor(row_factory=class_row(SearchRow)) as cur:
        # Never a server-side prepared statement: after five runs PostgreSQL may settle on a
        # generic plan costed for an average scope (a btree scan + exact sort for everyone).
        # Planned with the actual values, a small scope gets that exact scan and a large one
        # the HNSW index (approximate, see docs/retrieval.md).
        await cur.execute(sql, params, prepare=False)
        return await cur.fetchall()


async def search_all(
    conn: psycopg.AsyncConnection,
    scope: Scope,
    vector: np.ndarray,
    keywords: Keywords,
    k: int,
    *,
    kinds: Sequence[Kind] = ("fact", "chunk"),
    use_vector: bool = True,
    use_keyword: bool = True,
) -> list[SearchRow]:
    literal = vector_literal(vector)
    rows: list[SearchRow] = []
    for kind in kinds:
        rows += await search(conn, kind, scope, literal, getattr(keywords, kind), k,
                             use_vector=use_vector, use_keyword=use_keyword)
    return rows


async def record_surfaced(
    conn: psycopg.AsyncConnection, scope: Scope, items: Sequence[tuple[Kind, str]], now: datetime
) -> None:
    """Remember what this conversation was shown and bump the access counts of the facts that
    were new to it (so a count is the number of conversations shown the fact, even when two
    requests of one conversation race). Operational side effects of a read: not derived from
    the log, not rebuilt by a replay. Rows are taken in key order, so concurrent requests
    cannot deadlock; the commit does not wait for the WAL flush (a crash may lose the last few)."""
    if not items:
        return
    ordered = sorted(set(items))
    await conn.execute("SELECT set_config('synchronous_commit', 'off', true)")
    cur = await conn.execute(
        "INSERT INTO surfaced_items (tenant_id, conversation_id, item_kind, item_id, surfaced_at)"
        " SELECT %s, %s, kind, id, %s FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS u(kind, id, n)"
        " ORDER BY n ON CONFLICT DO NOTHING RETURNING item_kind, item_id",
        (scope.tenant_id, scope.conversation_id, now, [k for k, _ in ordered], [i for _, i in ordered]),
    )
    fact_ids = sorted(item_id for kind, item_id in await cur.fetchall() if kind == "fact")
    if fact_ids:
        await conn.execute(
            "WITH locked AS (SELECT fact_id FROM facts WHERE tenant_id = %s AND fact_id = ANY(%s)"
            " ORDER BY fact_id FOR UPDATE)"
            " UPDATE facts f SET access_count = f.access_count + 1,"
            " last_accessed_at = GREATEST(f.last_accessed_at, %s)"
            " FROM locked WHERE f.fact_id = locked.fact_id",
            (scope.tenant_id, fact_ids, now),
        )

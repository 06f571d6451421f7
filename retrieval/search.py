"""Hybrid search SQL: pgvector HNSW kNN + full-text over facts, chunks and messages, scoped by
tenant, user and subject."""

from __future__ import annotations

import asyncio
from operator import itemgetter
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Awaitable, Callable, Literal, Mapping, Sequence

import numpy as np
import orjson
import psycopg
from psycopg.rows import class_row

from retrieval.scoring import frozen_maker
from retrieval.keywords import CommonLexemes, Keywords, coverage, idf_weights, kept_lexemes, tsquery_text

Kind = Literal["fact", "chunk", "message"]
KINDS: tuple[Kind, ...] = ("fact", "chunk", "message")
NO_SEQ = 2**31 - 1  # "no upper bound" for a message seq


@dataclass(frozen=True)
class Scope:
    tenant_id: str
    user_id: str
    subject_id: str | None
    conversation_id: str  # whose surfaced_items are flagged, whose older messages are searched
    # Messages of this conversation at or after this seq are never candidates: the verbatim gap
    # of the response and the current turn (min of before_seq and the gap's first seq).
    messages_before_seq: int = NO_SEQ


@dataclass(frozen=True)
class SearchRow:
    """One candidate with both scores: every row has its cosine (0.0 for a message not yet
    embedded), and a keyword score (ts_rank, 0.0 when no query term matches), whichever search
    found it. Messages' item_id is "<conversation_id>:<seq>"."""

    kind: Kind
    item_id: str
    content: str
    cosine: float
    keyword_score: float
    in_vector: bool  # returned by the vector search (its top k)
    in_keyword: bool  # returned by the keyword search (its top k)
    surfaced_seqs: list[int | None] | None  # the turns (seqs) it was last shown at here: [latest, previous]
    timestamp: datetime  # event time for recency: facts updated_at, chunks occurred_end, messages occurred_at
    importance: int | None = None
    category: str | None = None
    memory_type: str | None = None
    visibility: str | None = None
    owner_user_id: str | None = None
    conversation_id: str | None = None
    range_start: int | None = None
    range_end: int | None = None  # exclusive
    occurred_start: datetime | None = None  # when its source happened (shown on the line)
    occurred_end: datetime | None = None
    role: str | None = None  # messages
    lexemes: list[str] | None = None  # the query's lexemes the row contains (keyword scoring)
    doc_lexemes: int = 0  # distinct lexemes of the row (its length, for keyword scoring)
    reply: str | None = None  # messages that ask something: the next message of the conversation
    reply_role: str | None = None
    # A question carrying its reply is scored as the pair: keyword_score covers the query's
    # lexemes either holds; `reply_lexemes` are the reply's, `own_keyword_score` the
    # question's coverage alone (for when the reply stands alone: service.pair_replies).
    reply_lexemes: list[str] | None = None
    own_keyword_score: float | None = None
    # A message's thread (items._THREAD: the messages of its session just before it): the
    # query's lexemes it holds; those the row lacks count at the search's thread weight.
    thread_lexemes: list[str] | None = None
    # The same speaker's next turn after a short reaction or question of the other's, in which
    # the answer may go on (items._CONTINUED; shown on the best message line only).
    continued: str | None = None


_FIELDS = [f.name for f in fields(SearchRow)]
_SCORE_AT = _FIELDS.index("keyword_score")
_PAIR_AT = _FIELDS.index("reply_lexemes")  # the last four fields: made by rows_with_coverage
_ROW = frozen_maker(SearchRow)


def row_of(values: Sequence) -> SearchRow:
    """SearchRow(*values), `values` holding every field in order, without the frozen dataclass's
    __init__ (scoring.frozen_maker: ~4.2 µs a row against ~1.5, for the ~80 rows of every context)."""
    return _ROW(*values)


def vector_literal(vector: np.ndarray) -> str:
    """pgvector's text form, so no per-connection type registration is needed: each float32 as
    the shortest decimal that reads back to the same float32 (orjson's, ~25 times faster than
    formatting each number in Python: 1.5-3 ms a query)."""
    return orjson.dumps(np.asarray(vector, dtype=np.float32).ravel(), option=orjson.OPT_SERIALIZE_NUMPY).decode()


_TABLE = {"fact": "facts", "chunk": "conversation_chunks", "message": "messages"}


# The transaction-local HNSW breadth and iterative scan (pgvector 0.8) of a search.
HNSW_SETTINGS = ("SELECT set_config('hnsw.ef_search', %s, true),"
                  " set_config('hnsw.iterative_scan', 'relaxed_order', true)")


async def prepare(conn: psycopg.AsyncConnection, ef_search: int, keyword_text: str | None,
                  common: dict[str, frozenset[str]] | None = None, max_terms: int = 32,
                  tenant: str | None = None, stats: CommonLexemes | None = None) -> Keywords:
    """The transaction-local HNSW breadth (an iterative scan keeps going while the scope filter
    rejects index hits, so a filtered kNN still returns k rows: pgvector 0.8), the keyword
    text's English lexemes minus each table's `common` ones, and (given `tenant`) their IDF
    (document frequencies `stats` keeps are not counted again)."""
    cur = await conn.execute(
        HNSW_SETTINGS + ","
        " ARRAY(SELECT u.lexeme FROM unnest(to_tsvector('english', %s)) u ORDER BY u.positions[1], u.lexeme)",
        (str(ef_search), keyword_text or ""),
    )
    lexemes = (await cur.fetchone())[2]
    common = common or {}
    per_kind = {kind: tsquery_text(lexemes, common.get(table, ()), max_terms) for kind, table in _TABLE.items()}
    searched = kept_lexemes(lexemes, (), max_terms)  # common ones too: their IDF is low, not zero
    weights = await idf_weights(conn, tenant, searched, cache=stats) if tenant is not None and searched else {}
    return Keywords(per_kind["fact"], per_kind["chunk"], per_kind["message"], tuple(searched), weights)


_FACT_COLUMNS = (
    "'fact' AS kind, t.fact_id AS item_id, t.content, t.updated_at AS timestamp, t.importance, t.category,"
    " t.memory_type, t.visibility, t.owner_user_id, t.source_conversation_id AS conversation_id,"
    " NULL::int AS range_start, NULL::int AS range_end, t.valid_from AS occurred_start,"
    " t.valid_from AS occurred_end, NULL AS role, NULL::text AS reply, NULL::text AS reply_role"
)
_CHUNK_COLUMNS = (
    "'chunk' AS kind, t.chunk_id AS item_id, t.content, COALESCE(t.occurred_end, t.created_at) AS timestamp,"
    " NULL::int AS importance, NULL AS category, NULL AS memory_type, NULL AS visibility,"
    " t.user_id AS owner_user_id, t.conversation_id, t.message_range_start AS range_start,"
    " t.message_range_end AS range_end, COALESCE(t.occurred_start, t.created_at) AS occurred_start,"
    " COALESCE(t.occurred_end, t.created_at) AS occurred_end, NULL AS role, NULL::text AS reply,"
    " NULL::text AS reply_role"
)
_MESSAGE_COLUMNS = (
    "'message' AS kind, t.conversation_id || ':' || t.seq AS item_id, t.content, t.occurred_at AS timestamp,"
    " NULL::int AS importance, NULL AS category, NULL AS memory_type, NULL AS visibility,"
    " t.user_id AS owner_user_id, t.conversation_id, t.seq AS range_start, t.seq + 1 AS range_end,"
    " t.occurred_at AS occurred_start, t.occurred_at AS occurred_end, t.role, r.content AS reply,"
    " r.role AS reply_role"
)
# A message that ends with a question is found with its answer: the next message of the
# conversation (a person's reply, not a system or tool message), unless that one is in the
# response's verbatim gap or at/after the turn (the model sees it there already).
_QUESTION = r"t.content ~ '\?[\s\"'')\]]*$'"
_REPLY_JOIN = (
    f" LEFT JOIN messages r ON {_QUESTION} AND r.tenant_id = t.tenant_id AND r.conversation_id = t.conversation_id"
    " AND r.seq = t.seq + 1 AND r.role IN ('user', 'assistant')"
    " AND (r.conversation_id <> %(conversation)s OR r.seq < %(before)s)"
)


def _fact_scope(subject_id: str | None) -> str:
    """Own current facts of this subject, plus facts shared by anyone about the same subject.
    Never another user's private fact, never deleted or superseded ones, never another tenant."""
    live = "t.tenant_id = %(tenant)s AND t.deleted_at IS NULL AND t.valid_to IS NULL"
    if subject_id is None:
        return f"{live} AND t.owner_user_id = %(user)s AND t.subject_id IS NULL"
    return f"{live} AND t.subject_id = %(subject)s AND (t.owner_user_id = %(user)s OR t.visibility = 'shared')"


def _user_scope(subject_id: str | None, user_column: str = "t.user_id") -> str:
    subject = "t.subject_id IS NULL" if subject_id is None else "t.subject_id = %(subject)s"
    return f"t.tenant_id = %(tenant)s AND {user_column} = %(user)s AND {subject}"


def _message_scope(subject_id: str | None) -> str:
    """This conversation's messages before the verbatim gap and the current turn, and the
    user's other conversations of the same subject (the scope of chunks). Never another
    user's conversation (unless it is this one), never another tenant's."""
    return (f"t.tenant_id = %(tenant)s AND ((t.conversation_id = %(conversation)s AND t.seq < %(before)s)"
            f" OR (t.conversation_id <> %(conversation)s AND {_user_scope(subject_id)}))")


def _surfaced(kind: str, item_id: str) -> str:
    """The turns it was last shown at in this conversation: [latest, the one before], or NULL."""
    return (f"(SELECT ARRAY[s.surfaced_seq, s.previous_seq] FROM surfaced_items s WHERE s.tenant_id = %(tenant)s"
            f" AND s.conversation_id = %(conversation)s AND s.item_kind = '{kind}' AND s.item_id = {item_id})"
            f" AS surfaced_seqs")


def _keyword_columns(keyword: bool) -> str:
    """ts_rank (float8: a bare 0.0 literal would arrive as Decimal) when the keyword search ran,
    and always the query lexemes the row contains and its length in distinct lexemes (an item
    found by meaning still gets credit for the words it shares with the query)."""
    tsquery = "%(keywords)s::tsquery"
    rank = (f"CASE WHEN t.content_tsv @@ {tsquery} THEN ts_rank(t.content_tsv, {tsquery})::float8"
            f" ELSE 0.0::float8 END" if keyword else "0.0::float8")
    return (f"{rank} AS keyword_score,"
            f" ARRAY(SELECT u.lexeme FROM unnest(t.content_tsv) u WHERE u.lexeme = ANY(%(lexemes)s::text[]))"
            f" AS lexemes, length(t.content_tsv) AS doc_lexemes")


def search_sql(kind: Kind, subject_id: str | None, *, vector: bool, keyword: bool) -> str:
    """One statement: the top k by cosine distance (HNSW), the top k by ts_rank (GIN), their
    union with both scores and the surfaced seq. A disabled search contributes nothing."""
    if kind == "message":
        return _message_sql(subject_id, vector=vector, keyword=keyword)
    table, key, columns = (
        ("facts", "fact_id", _FACT_COLUMNS) if kind == "fact" else ("conversation_chunks", "chunk_id", _CHUNK_COLUMNS)
    )
    scope = _fact_scope(subject_id) if kind == "fact" else _user_scope(subject_id)
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
    return (
        f"WITH vec AS MATERIALIZED ({vec}), kw AS MATERIALIZED ({kw})"
        f" SELECT {columns},"
        f" (1 - (t.embedding <=> %(vector)s::vector))::float8 AS cosine, {_keyword_columns(keyword)},"
        f" t.{key} IN (SELECT id FROM vec) AS in_vector, t.{key} IN (SELECT id FROM kw) AS in_keyword,"
        f" {_surfaced(kind, f't.{key}')}"
        f" FROM {table} t WHERE t.tenant_id = %(tenant)s"
        f" AND t.{key} IN (SELECT id FROM vec UNION SELECT id FROM kw)"
    )


_MESSAGE_ID = "t.conversation_id || ':' || t.seq"


def _message_sql(subject_id: str | None, *, vector: bool, keyword: bool) -> str:
    """Messages: the vector search runs over message_embeddings (the scope columns are copied
    there), the keyword search over the log's own tsvector; a message not embedded yet can
    still be found by its words (cosine 0). Only what people said: no system or tool messages."""
    scope = _message_scope(subject_id)
    tsquery = "%(keywords)s::tsquery"
    vec = (
        f"SELECT t.conversation_id, t.seq FROM message_embeddings t WHERE {scope}"
        f" ORDER BY t.embedding <=> %(vector)s::vector LIMIT %(k)s"
        if vector else "SELECT NULL::text, NULL::int WHERE false"
    )
    kw = (
        f"SELECT t.conversation_id, t.seq FROM messages t WHERE {scope} AND t.role IN ('user', 'assistant')"
        f" AND t.content_tsv @@ {tsquery} ORDER BY ts_rank(t.content_tsv, {tsquery}) DESC, t.conversation_id, t.seq"
        f" LIMIT %(k)s"
        if keyword else "SELECT NULL::text, NULL::int WHERE false"
    )
    return (
        f"WITH vec(conversation_id, seq) AS MATERIALIZED ({vec}), kw(conversation_id, seq) AS MATERIALIZED ({kw})"
        f" SELECT {_MESSAGE_COLUMNS},"
        f" COALESCE(1 - (e.embedding <=> %(vector)s::vector), 0.0)::float8 AS cosine, {_keyword_columns(keyword)},"
        f" (t.conversation_id, t.seq) IN (SELECT * FROM vec) AS in_vector,"
        f" (t.conversation_id, t.seq) IN (SELECT * FROM kw) AS in_keyword,"
        f" {_surfaced('message', _MESSAGE_ID)}"
        f" FROM messages t LEFT JOIN message_embeddings e"
        f" ON e.tenant_id = t.tenant_id AND e.conversation_id = t.conversation_id AND e.seq = t.seq"
        f"{_REPLY_JOIN}"
        f" WHERE t.tenant_id = %(tenant)s AND t.role IN ('user', 'assistant')"
        f" AND (t.conversation_id, t.seq) IN (SELECT * FROM vec UNION SELECT * FROM kw)"
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
    lexemes: Sequence[str] = (),
) -> list[SearchRow]:
    """Candidates of one table, unordered (the caller ranks them). `keywords` is tsquery text
    (see tsquery_text); None turns the keyword search off."""
    literal = vector if isinstance(vector, str) else vector_literal(vector)
    sql = search_sql(kind, scope.subject_id, vector=use_vector, keyword=use_keyword and keywords is not None)
    params = {
        "tenant": scope.tenant_id, "user": scope.user_id, "subject": scope.subject_id,
        "conversation": scope.conversation_id, "vector": literal, "keywords": keywords or "", "k": k,
        "before": scope.messages_before_seq, "lexemes": list(lexemes),
    }
    async with conn.cursor(row_factory=class_row(SearchRow)) as cur:
        # Never a server-side prepared statement: after five runs PostgreSQL may settle on a
        # generic plan costed for an average scope (a btree scan + exact sort for everyone).
        # Planned with the actual values, a small scope gets that exact scan and a large one
        # the HNSW index (approximate, see docs/retrieval.md).
        await cur.execute(sql, params, prepare=False)
        return await cur.fetchall()


def search_all_sql(kinds: Sequence[Kind], subject_id: str | None, *, vector: bool,
                   keyword_kinds: Sequence[Kind]) -> str:
    """The searches of several tables as one statement (one round trip, one parse): each
    table's search_sql, its tsquery its own parameter (`keywords_<kind>`), joined by UNION ALL
    (the rows come table by table, in the order of `kinds`)."""
    return " UNION ALL ".join(
        "(" + search_sql(kind, subject_id, vector=vector, keyword=kind in keyword_kinds)
        .replace("%(keywords)s", f"%(keywords_{kind})s") + ")" for kind in kinds)


SideConnection = Callable[[], AbstractAsyncContextManager["psycopg.AsyncConnection | None"]]


async def search_all(
    conn: psycopg.AsyncConnection,
    scope: Scope,
    vector: np.ndarray,
    keywords: Keywords,
    k: int,
    *,
    kinds: Sequence[Kind] = KINDS,
    use_vector: bool = True,
    use_keyword: bool = True,
    side: SideConnection | None = None,
    ef_search: int | None = None,
) -> list[SearchRow]:
    """search() of every kind, in one statement. Each row's keyword_score is its IDF-weighted
    coverage of the searched lexemes (`keywords.weights`; every lexeme counts 1 without them):
    ts_rank only picked the keyword search's top k.

    `side`: a source of other connections (an async context manager giving one, or None when
    none is free right now). With it, each table is searched by a statement of its own, the
    first on `conn` and the others at the same time on side connections, with the same HNSW
    settings (`ef_search`): PostgreSQL runs them on several cores. The tables whose side
    connection is not free are searched together on `conn` (with none free: the one
    statement). The rows are the same as the one statement's, table by table in the order of
    `kinds`."""
    if not kinds:
        return []
    keyword_kinds = [kind for kind in kinds if use_keyword and keywords.for_kind(kind) is not None]
    params = {
        "tenant": scope.tenant_id, "user": scope.user_id, "subject": scope.subject_id,
        "conversation": scope.conversation_id, "vector": vector_literal(vector), "k": k,
        "before": scope.messages_before_seq, "lexemes": list(keywords.lexemes),
        **{f"keywords_{kind}": keywords.for_kind(kind) or "" for kind in kinds},
    }
    weights = keywords.weights or {lexeme: 1.0 for lexeme in keywords.lexemes}

    def sql(of: Sequence[Kind]) -> str:
        return search_all_sql(of, scope.subject_id, vector=use_vector, keyword_kinds=keyword_kinds)

    if side is None or len(kinds) < 2:
        return await _fetch(conn, sql(kinds), params, weights)
    return await across_connections(conn, kinds, lambda on, of: _fetch(on, sql(of), params, weights), side,
                                    ef_search)


async def across_connections(conn: psycopg.AsyncConnection, kinds: Sequence[Kind],
                             fetch: Callable[[psycopg.AsyncConnection, Sequence[Kind]], Awaitable[list[SearchRow]]],
                             side: SideConnection, ef_search: int | None) -> list[SearchRow]:
    """`fetch` of the first kind on `conn` and of each other kind on a side connection, at the
    same time, each side one with the same HNSW settings (`ef_search`); the kinds whose side
    connection is not free are fetched together on `conn`. Rows kind by kind, in `kinds` order."""

    async def on_side(other: psycopg.AsyncConnection, kind: Kind) -> list[SearchRow]:
        try:
            if ef_search is not None:
                await other.execute(HNSW_SETTINGS, (str(ef_search),))
            return await fetch(other, [kind])
        finally:
            await other.rollback()  # transaction-local settings: leave nothing behind

    async with AsyncExitStack() as stack:
        others = [await stack.enter_async_context(side()) for _ in kinds[1:]]
        away = [(kind, other) for kind, other in zip(kinds[1:], others) if other is not None]
        here = [kinds[0], *(kind for kind, other in zip(kinds[1:], others) if other is None)]
        results = await asyncio.gather(fetch(conn, here), *(on_side(other, kind) for kind, other in away),
                                       return_exceptions=True)
    for result in results:  # raised once every statement is done: nothing left running
        if isinstance(result, BaseException):
            raise result
    by_kind: dict[str, list[SearchRow]] = {}
    for found in results:
        for row in found:
            by_kind.setdefault(row.kind, []).append(row)
    return [row for kind in kinds for row in by_kind.get(kind, ())]


async def _fetch(conn: psycopg.AsyncConnection, sql: str, params: Mapping, weights: Mapping[str, float]
                 ) -> list[SearchRow]:
    async with conn.cursor(row_factory=rows_with_coverage(weights)) as cur:
        await cur.execute(sql, params, prepare=False)  # planned with the actual values: see search()
        return await cur.fetchall()


def column_names(cursor: psycopg.AsyncCursor) -> list[str]:
    """The current result's column names, read from libpq: `cursor.description` builds a `Column`
    (with its type lookups) per column on every call, ~10 times the cost, on every context."""
    result = cursor.pgresult
    return [] if result is None else [result.fname(i).decode() for i in range(result.nfields)]


def rows_with_coverage(weights: Mapping[str, float], thread_weight: float = 0.0):
    """A row factory: SearchRow with keyword_score = coverage of the row's lexemes, set as the
    row is built (no copy of a few hundred rows afterwards). A question carrying its reply is
    scored with the words of both; a message with a thread (`thread_lexemes`) gets the
    coverage of the query words only its thread holds x `thread_weight` on top."""
    total = sum(weights.values())

    def covered(words: set[str], thread: Sequence[str] | None) -> float:
        if total <= 0:
            return 0.0
        own = coverage(words, weights, total) if words else 0.0
        if not thread or thread_weight <= 0:
            return own
        return own + thread_weight * coverage(set(thread) - words, weights, total)

    def factory(cursor: psycopg.AsyncCursor):
        names = column_names(cursor)
        # The statement's columns in field order, the keyword score left out (it is computed here).
        before = itemgetter(*(names.index(name) for name in _FIELDS[:_SCORE_AT]))
        after = itemgetter(*(names.index(name) for name in _FIELDS[_SCORE_AT + 1:_PAIR_AT]))
        lexemes_at = names.index("lexemes")
        reply_at = names.index("reply_lexemes") if "reply_lexemes" in names else None
        thread_at = names.index("thread_lexemes") if "thread_lexemes" in names else None
        continued_at = names.index("continued") if "continued" in names else None

        def make(values: Sequence) -> SearchRow:
            matched = set(values[lexemes_at] or ())
            thread = values[thread_at] if thread_at is not None else None
            pair = values[reply_at] if reply_at is not None else None
            goes_on = values[continued_at] if continued_at is not None else None
            own = covered(matched, thread)
            if pair is None:
                return row_of((*before(values), own, *after(values), None, None, thread or None, goes_on))
            both = covered(matched | set(pair), thread)
            return row_of((*before(values), both, *after(values), pair, own, thread or None, goes_on))

        return make

    return factory


# What this conversation was shown, at which turn, and the access counts of the facts that were
# new to it, in one statement: the facts' rows follow the surfaced rows' (a sort needs them all),
# both in key order, so concurrent requests cannot deadlock.
SURFACED_SQL = (
    "WITH shown AS (INSERT INTO surfaced_items AS s"
    " (tenant_id, conversation_id, item_kind, item_id, surfaced_at, surfaced_seq)"
    " SELECT %(tenant)s, %(conversation)s, kind, id, %(now)s, %(seq)s"
    " FROM unnest(%(kinds)s::text[], %(ids)s::text[]) WITH ORDINALITY AS u(kind, id, n)"
    " CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode"
    " ORDER BY n ON CONFLICT (tenant_id, conversation_id, item_kind, item_id) DO UPDATE SET"
    " surfaced_at = GREATEST(s.surfaced_at, EXCLUDED.surfaced_at),"
    " previous_seq = CASE WHEN EXCLUDED.surfaced_seq > s.surfaced_seq THEN s.surfaced_seq"
    " ELSE s.previous_seq END,"
    " surfaced_seq = GREATEST(s.surfaced_seq, EXCLUDED.surfaced_seq)"
    " RETURNING item_kind, item_id, xmax = 0 AS inserted)"
    " INSERT INTO fact_access AS a (fact_id, tenant_id, access_count, last_accessed_at)"
    " SELECT f.fact_id, f.tenant_id, 1, %(now)s FROM facts f WHERE f.tenant_id = %(tenant)s"
    " AND f.fact_id IN (SELECT item_id FROM shown WHERE item_kind = 'fact' AND inserted)"
    " ORDER BY f.fact_id"
    " ON CONFLICT (fact_id) DO UPDATE SET access_count = a.access_count + 1,"
    " last_accessed_at = GREATEST(a.last_accessed_at, EXCLUDED.last_accessed_at)"
)


def one_query(conn: psycopg.AsyncConnection, statements: Sequence[tuple[str, Mapping | Sequence | None]]) -> str:
    """Several statements as one query string, each with its parameters bound by psycopg on the
    client: executed without parameters it goes as one simple query, one round trip, its
    results read in order with the cursor's nextset(). (psycopg's pipeline mode would send
    them together too, but a BEGIN and the pipeline's closing Sync cost a round trip each.)"""
    client = psycopg.AsyncClientCursor(conn)
    return "; ".join(client.mogrify(sql, params) for sql, params in statements)


async def record_surfaced(
    conn: psycopg.AsyncConnection, scope: Scope, items: Sequence[tuple[Kind, str]], now: datetime, turn_seq: int,
    *, commit: bool = False,
) -> None:
    """Remember what this conversation was shown, at which turn (`turn_seq`), and bump the
    access counts of the facts that were new to it (so a count is the number of conversations
    shown the fact, even when two requests of one conversation race). Operational side effects
    of a read: not derived from the log, not rebuilt by a replay. Rows are taken in key order,
    so concurrent requests cannot deadlock; the commit does not wait for the WAL flush (a crash
    may lose the last few). One statement (`SURFACED_SQL`); `commit`: committed with it, one
    round trip either way: sent with the open transaction's COMMIT, or, when no transaction is
    open, as a statement of its own in autocommit (no BEGIN sent alone first; a connection in
    autocommit already stays so)."""
    if not items:
        if commit:
            await conn.commit()
        return
    ordered = sorted(set(items))
    params = {"tenant": scope.tenant_id, "conversation": scope.conversation_id, "now": now, "seq": turn_seq,
              "kinds": [k for k, _ in ordered], "ids": [i for _, i in ordered]}
    if not commit or (conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE):
        await conn.execute(SURFACED_SQL, params)
    elif conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        await conn.set_autocommit(True)  # no I/O: the statement is then its own transaction
        try:
            await conn.execute(SURFACED_SQL, params)
        finally:
            await conn.set_autocommit(False)
    else:
        await conn.execute(one_query(conn, [(SURFACED_SQL, params), ("COMMIT", None)]))


__all__ = ["CommonLexemes", "KINDS", "across_connections", "Keywords", "Kind", "NO_SEQ", "SURFACED_SQL", "Scope", "SearchRow", "SideConnection", "prepare",
           "one_query", "record_surfaced", "rows_with_coverage", "search", "search_all", "search_all_sql", "search_sql", "tsquery_text", "vector_literal"]

"""One search per context over memory_items (migration 0020): every kind of a scope in one
statement, an exact scan where the scope is small, the HNSW index only where it is large."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import psycopg

from retrieval.keywords import Keywords, idf, kept_lexemes, quote
from retrieval.prescore import Prescore, best_rows_sql, term_params
from retrieval.search import (KINDS, Kind, Scope, SearchRow, SideConnection, across_connections, one_query,
                              rows_with_coverage, vector_literal)

# A scope of up to this many items is scanned exactly (a user's few thousand items cost a
# few ms); a larger one is searched through the HNSW index (docs/retrieval.md).
EXACT_SCAN_MAX_ITEMS = 20_000
DF_CAP = 5_000  # the document frequencies the IDF sees are capped, as when they were counted on the read


@dataclass(frozen=True)
class Prepared:
    """What the prepare statement found: the keywords (their IDF from memory_lexicon) and how
    many items the scope holds (from memory_scopes), which picks the search's plan."""

    keywords: Keywords
    scope_items: int


PREPARE_SQL = (
    "SELECT set_config('hnsw.ef_search', %(ef_search)s, true),"
    " set_config('hnsw.iterative_scan', 'relaxed_order', true), lx.a AS lexemes,"
    " (SELECT COALESCE(json_object_agg(l.lexeme, l.df), '{}') FROM memory_lexicon l"
    "  WHERE l.tenant_id = %(tenant)s AND l.lexeme = ANY(lx.a || ''::text)) AS df,"
    " (SELECT COALESCE(sum(s.items), 0)::int FROM memory_scopes s WHERE s.tenant_id = %(tenant)s"
    "  AND ((s.user_id = %(user)s AND s.subject_key = COALESCE(%(subject)s, ''))"
    "   OR (s.user_id = '' AND s.subject_key = %(subject)s))) AS scope_items"
    " FROM (SELECT ARRAY(SELECT u.lexeme FROM unnest(to_tsvector('english', %(text)s)) u"
    "  ORDER BY u.positions[1], u.lexeme) AS a) lx"
)


def keywords_from(lexemes: Sequence[str], frequencies: Mapping[str, int], max_terms: int,
                  max_doc_fraction: float) -> Keywords:
    """The tsquery (the query's lexemes minus those in more than `max_doc_fraction` of the
    tenant's items: they match too much to rank quickly and say little) and every searched
    lexeme's IDF, from the document frequencies kept on write ('' holds the item count)."""
    documents = max(int(frequencies.get("", 0)), 1)
    searched = kept_lexemes(lexemes, (), max_terms)  # common ones too: their IDF is low, not zero
    common = {lexeme for lexeme in searched if int(frequencies.get(lexeme, 0)) > max_doc_fraction * documents}
    tsquery = " | ".join(quote(lexeme) for lexeme in searched if lexeme not in common) or None
    weights = {lexeme: idf(min(int(frequencies.get(lexeme, 0)), DF_CAP), documents) for lexeme in searched}
    return Keywords(tsquery, tsquery, tsquery, tuple(searched), weights)


def prepare_params(scope: Scope, ef_search: int, keyword_text: str | None) -> dict:
    """The prepare statement's (`PREPARE_SQL`) parameters, for a caller that sends it with
    others in one round trip (api/turn_context.py); `prepared_from` reads its row."""
    return {"ef_search": str(ef_search), "tenant": scope.tenant_id, "user": scope.user_id,
            "subject": scope.subject_id, "text": keyword_text or ""}


def prepared_from(row: Sequence, max_terms: int = 32, max_doc_fraction: float = 0.05) -> Prepared:
    _, _, lexemes, frequencies, scope_items = row
    if isinstance(frequencies, str):
        frequencies = json.loads(frequencies)
    return Prepared(keywords_from(lexemes, frequencies, max_terms, max_doc_fraction), int(scope_items))


async def prepare_items(conn: psycopg.AsyncConnection, scope: Scope, ef_search: int, keyword_text: str | None,
                        max_terms: int = 32, max_doc_fraction: float = 0.05) -> Prepared:
    """One statement: the transaction's HNSW settings, the keyword text's lexemes, their
    document frequencies and the scope's size. Nothing is counted: both are kept on write."""
    cur = await conn.execute(PREPARE_SQL, prepare_params(scope, ef_search, keyword_text), prepare=False)
    return prepared_from(await cur.fetchone(), max_terms, max_doc_fraction)


# Who may see what (every branch is one index of memory_items): the asker's own items of this
# subject (facts, chunks, their other conversations' messages), facts shared about the same
# subject by anyone, and this conversation's messages before the verbatim gap and the turn.
# Deleted and superseded facts and system/tool messages are never in the table.
def scope_sql(subject_id: str | None) -> str:
    own_subject = "t.subject_id IS NULL" if subject_id is None else "t.subject_id = %(subject)s"
    shared = "" if subject_id is None else " OR (t.shared AND t.subject_id = %(subject)s)"
    return (
        "t.tenant_id = %(tenant)s AND t.content IS NOT NULL AND t.kind = ANY(%(kinds)s::text[]) AND ("
        f"(t.user_id = %(user)s AND {own_subject}"
        " AND (t.kind <> 'message' OR t.conversation_id IS DISTINCT FROM %(conversation)s))"
        f"{shared}"
        " OR (t.kind = 'message' AND t.conversation_id = %(conversation)s AND t.seq < %(before)s))"
    )


_COLUMNS = (
    "t.kind, t.item_id, t.content, t.ts AS timestamp, t.importance, t.category, t.memory_type, t.visibility,"
    " t.user_id AS owner_user_id, t.conversation_id, t.range_start, t.range_end, t.occurred_start,"
    " t.occurred_end, t.role"
)
# A message that asks something (a sentence of it ends with "?": "Got any paintings to show?
# I'd love to see them.") is found with its answer: the next message of the conversation
# (memory_items holds only people's messages), unless that one is in the response's verbatim
# gap or at/after the turn (the model sees it there already). In a dialogue the reply to a
# question means the question plus itself; the reply rarely repeats the question's words.
_ASKS = r"'\?([\s\"'')\]]|$)'"  # a sentence of it ends with "?" (a SQL regex literal)
_QUESTION = f"t.content ~ {_ASKS}"
# The reply and the continued turn are looked up row by row through the primary key (a LATERAL
# subquery with LIMIT 1: never pulled up into a join, and at most one row matches the key anyway):
# as plain joins the planner hashed every message of the tenant, and ran the question regex over
# all of them, for the ~250 rows a long conversation's search returns (docs/retrieval.md, "Ninth
# round").
_REPLY = (
    " LEFT JOIN LATERAL (SELECT r.item_id, r.content, r.role, r.content_tsv FROM memory_items r"
    f" WHERE t.kind = 'message' AND {_QUESTION} AND r.tenant_id = t.tenant_id"
    " AND r.kind = 'message' AND r.item_id = t.conversation_id || ':' || (t.seq + 1) AND r.content IS NOT NULL"
    " AND (r.conversation_id <> %(conversation)s OR r.seq < %(before)s) LIMIT 1) r ON true"
)
# A question that carries its reply is scored as the pair: the query's words the reply holds
# count for its keyword coverage too (`reply_lexemes`; a short reply, "It happened at yoga in
# the park.", means its question plus itself). NULL for a row without a reply.
# The searched lexemes a row's words hold: the row's tsvector with every lexeme set to weight D,
# the searched ones to A, filtered to A (`setweight`, `ts_filter`: one pass over the row's
# lexemes in C, exact lexeme equality as a one-word tsquery's match). Unnesting the tsvector made
# a row per distinct word of every row (a chunk has ~80: "Ninth round"); a one-word tsquery per
# searched lexeme matched with `@@` was a subquery per row, ~1.8 of the search's ~12.6 CPU-ms on
# a long conversation ("Tenth round"). The array is in the tsvector's order: every reader treats
# it as a set.
_HELD = ("COALESCE(tsvector_to_array(ts_filter(setweight(setweight({tsv}, 'D'), 'A', %(lexemes)s::text[]),"
         " '{{a}}')), '{{}}'::text[])")
# The row's columns after its scores. `item_seq` (a message's seq) is for the continued turn's
# lookup after the cut (`finish_sql`); the row factory reads columns by name and ignores it.
_TAIL = (
    " r.content AS reply, r.role AS reply_role,"
    f" {_HELD.format(tsv='t.content_tsv')} AS lexemes,"
    " length(t.content_tsv) AS doc_lexemes,"
    f" CASE WHEN r.content_tsv IS NOT NULL THEN {_HELD.format(tsv='r.content_tsv')} END AS reply_lexemes,"
    " t.seq AS item_seq"
)
_TSQUERY = "%(keywords)s::tsquery"
# The thread of a question carrying its reply: the two messages of the same session just
# before it (same conversation, at most THREAD_GAP earlier). In a dialogue the pair's subject
# is often there ("I met my new neighbor Anna!" -> "How did you two meet?" -> "It happened at
# yoga in the park."): the query's words the thread holds count for the pair at
# `thread_weight` (search.rows_with_coverage), and the messages after a keyword hit are
# candidates too. Off by default (RetrievalSettings.thread_weight: measured, docs/evaluation.md).
THREAD_BACK = 2
THREAD_GAP = "1 hour"
_BACK_IDS = ", ".join(f"t.conversation_id || ':' || (t.seq - {d})" for d in range(1, THREAD_BACK + 1))
_THREAD = (
    " LEFT JOIN LATERAL (SELECT ARRAY(SELECT DISTINCT u.lexeme FROM memory_items p, unnest(p.content_tsv) u"
    " WHERE r.item_id IS NOT NULL AND p.tenant_id = t.tenant_id AND p.kind = 'message'"
    f" AND p.item_id IN ({_BACK_IDS}) AND p.ts >= t.ts - interval '{THREAD_GAP}'"
    " AND u.lexeme = ANY(%(lexemes)s::text[])) AS a) th ON true"
)
_THREAD_TAIL = ", th.a AS thread_lexemes"
# An answer often goes on in the same speaker's next turn when the other asks for more ("I'm
# into "Sapiens"." -> "Any recent ones that struck you?" -> "I read "Avalanche"."): a message
# row (its reply, if it carries one) comes with that turn, when the message between asks
# something and the turn is in the same session and visible; the service shows it on the best
# message line (service.continue_best). After a mere reaction ("Wow!") a speaker as often
# changes the subject (measured: docs/evaluation.md).
# Both turns are read by one index scan (a message's item_id is its conversation_id:seq, so the
# turn after the one between is known before reading it): the question between (`_ASKS`) and
# the turn's content when it qualifies, an aggregate over the two keys (always one row: NULL
# when either is missing). It was two lookups, one after the other: the same rows, one more
# reference to memory_items to plan ("Eleventh round, PostgreSQL"; not priced on its own).
_NEXT = "b.conversation_id || ':' || (b.item_seq + CASE WHEN b.reply IS NULL THEN {d} ELSE {d} + 1 END)"
_CONTINUED = (
    " LEFT JOIN LATERAL (SELECT CASE WHEN bool_or(n.item_id = " + _NEXT.format(d=1) + f" AND n.content ~ {_ASKS})"
    " THEN max(n.content) FILTER (WHERE n.item_id = " + _NEXT.format(d=2)
    + " AND n.role = COALESCE(b.reply_role, b.role)"
    f" AND n.ts <= b.timestamp + interval '{THREAD_GAP}'"
    " AND (n.conversation_id <> %(conversation)s OR n.seq < %(before)s))"
    " END AS content FROM memory_items n WHERE b.kind = 'message' AND n.tenant_id = %(tenant)s AND n.kind = 'message'"
    " AND n.item_id IN (" + _NEXT.format(d=1) + ", " + _NEXT.format(d=2) + ") AND n.content IS NOT NULL) n2 ON true"
)
_CONTINUED_TAIL = ", n2.content AS continued"


def finish_sql(search: str, continued: bool) -> str:
    """The rows of `search` (exact_sql's or indexed_sql's, cut or not: best_rows_sql) with what
    the ranking does not read, looked up for the rows handed on only: when this conversation
    last surfaced each (`surfaced_seqs`) and, with `continued`, the turn its answer may go on in
    (`_CONTINUED`: one index scan a message row); kind by kind in the order of `%(kinds)s`, then
    by id. A long conversation's search finds ~340 rows and hands on 80: these lookups cost ~1.9
    CPU-ms over all of them ("Tenth round")."""
    return (
        "SELECT b.*, CASE WHEN s.item_id IS NULL THEN NULL ELSE ARRAY[s.surfaced_seq, s.previous_seq] END"
        f" AS surfaced_seqs{_CONTINUED_TAIL if continued else ''} FROM ({search}) b"
        " LEFT JOIN surfaced_items s ON s.tenant_id = %(tenant)s AND s.conversation_id = %(conversation)s"
        f" AND s.item_kind = b.kind AND s.item_id = b.item_id{_CONTINUED if continued else ''}"
        " ORDER BY array_position(%(kinds)s::text[], b.kind::text), b.item_id"
    )


# The messages right after a keyword top-k message (within THREAD_BACK of it, same conversation).
_FOLLOWS = (
    ", near AS (SELECT ranked.*, COALESCE(CASE WHEN ranked.kind = 'message' THEN bool_or(ranked.hit"
    " AND ranked.by_keyword <= %(k)s) OVER (PARTITION BY ranked.kind, ranked.conversation_id ORDER BY ranked.seq"
    f" ROWS BETWEEN {THREAD_BACK} PRECEDING AND 1 PRECEDING) END, false) AS follows FROM ranked)"
)

_CARRIED = ("t.tenant_id, t.kind, t.item_id, t.content, t.content_tsv, t.ts, t.importance, t.category, t.memory_type,"
            " t.visibility, t.user_id, t.conversation_id, t.seq, t.range_start, t.range_end, t.occurred_start,"
            " t.occurred_end, t.role")


def _scores(vector: bool, keyword: bool) -> tuple[str, str, str]:
    """The exact scan's expressions: a row's distance (over `t`), its keyword match (over `t`)
    and its keyword rank for the hits only (over `s`, the scan's rows)."""
    distance = "t.embedding <=> %(vector)s::vector" if vector else "NULL::float8"
    hit = f"t.content_tsv @@ {_TSQUERY}" if keyword else "false"
    rank = f"CASE WHEN s.hit THEN ts_rank(s.content_tsv, {_TSQUERY}) END" if keyword else "NULL::float4"
    return distance, hit, rank


# Each row of `c` with its place in its kind by distance and by keyword rank (ties by id).
_RANKED = (" ranked AS (SELECT c.*,"
           " row_number() OVER (PARTITION BY c.kind ORDER BY c.distance NULLS LAST, c.item_id) AS by_vector,"
           " row_number() OVER (PARTITION BY c.kind ORDER BY c.rank DESC NULLS LAST, c.item_id) AS by_keyword"
           " FROM c)")


def exact_sql(subject_id: str | None, *, vector: bool, keyword: bool, thread: bool = False) -> str:
    """A small scope, read once: every item's exact cosine and keyword match, the top k of each
    kind by either, its columns carried along (no second visit of the table). `thread`: the
    two messages after a keyword top-k message are candidates too, and every message row
    carries the query's lexemes of its thread (`_THREAD`). The rows in no order, without what
    `finish_sql` adds (the surfaced turns, the continued turn)."""
    if thread:
        return _exact_ranked_sql(subject_id, vector=vector, keyword=keyword)
    distance, hit, rank = _scores(vector, keyword)
    # The scope is read once, narrow: each row's place (ctid), key and both scores (the keyword
    # match once a row, kept apart by OFFSET 0; its rank for the hits only); the rows of either
    # top k by kind are ranked on those narrow rows and only they are read whole again, by
    # their ctid (a TID scan a row, in the statement's snapshot: the same row version). Carrying
    # every column of the ~1,200 rows of a long conversation's scope through the two rankings
    # cost more than the scan itself ("Eleventh round, PostgreSQL").
    return (
        f"WITH s AS (SELECT t.ctid AS tid, t.kind, t.item_id, t.content_tsv, ({distance})::float8 AS distance,"
        f" {hit} AS hit FROM memory_items t WHERE {scope_sql(subject_id)} OFFSET 0),"
        f" c AS (SELECT s.tid, s.kind, s.item_id, s.distance, s.hit, {rank} AS rank FROM s),"
        f"{_RANKED},"
        " top AS (SELECT ranked.tid, ranked.distance, ranked.hit, ranked.rank,"
        " (ranked.distance IS NOT NULL AND ranked.by_vector <= %(k)s) AS in_vector,"
        " (ranked.hit AND ranked.by_keyword <= %(k)s) AS in_keyword FROM ranked"
        " WHERE (ranked.distance IS NOT NULL AND ranked.by_vector <= %(k)s)"
        " OR (ranked.hit AND ranked.by_keyword <= %(k)s))"
        f" SELECT {_COLUMNS}, COALESCE(1 - x.distance, 0.0)::float8 AS cosine,"
        " CASE WHEN x.hit THEN x.rank::float8 ELSE 0.0::float8 END AS keyword_score, x.in_vector, x.in_keyword, "
        f"{_TAIL} FROM top x CROSS JOIN LATERAL (SELECT * FROM memory_items t WHERE t.ctid = x.tid LIMIT 1) t{_REPLY}"
    )


def _exact_ranked_sql(subject_id: str | None, *, vector: bool, keyword: bool) -> str:
    """exact_sql with the thread (`_FOLLOWS` reads each row's keyword rank in its conversation's
    order): every row of the scope ranked by both scores with window functions."""
    distance, hit, rank = _scores(vector, keyword)
    # The keyword match is computed once a row (`s`, kept apart by OFFSET 0: PostgreSQL does not
    # share the expression between the `hit` column and the rank's CASE), the rank for the hits
    # only: ~0.45 of the search's ~10.7 CPU-ms on a long conversation ("Tenth round").
    return (
        f"WITH s AS (SELECT {_CARRIED}, ({distance})::float8 AS distance, {hit} AS hit"
        f" FROM memory_items t WHERE {scope_sql(subject_id)} OFFSET 0),"
        f" c AS (SELECT s.*, {rank} AS rank FROM s),"
        f"{_RANKED}"
        f"{_FOLLOWS if keyword else ', near AS (SELECT ranked.*, false AS follows FROM ranked)'}"
        f" SELECT {_COLUMNS}, COALESCE(1 - t.distance, 0.0)::float8 AS cosine,"
        " CASE WHEN t.hit THEN t.rank::float8 ELSE 0.0::float8 END AS keyword_score,"
        " (t.distance IS NOT NULL AND t.by_vector <= %(k)s) AS in_vector,"
        f" (t.hit AND t.by_keyword <= %(k)s) AS in_keyword, {_TAIL}{_THREAD_TAIL}"
        f" FROM near t{_REPLY}{_THREAD}"
        " WHERE (t.distance IS NOT NULL AND t.by_vector <= %(k)s) OR (t.hit AND t.by_keyword <= %(k)s) OR t.follows"
    )


def indexed_sql(subject_id: str | None, *, vector: bool, keyword: bool, thread: bool = False) -> str:
    """A large scope: per kind, the top k by the HNSW index (an iterative scan keeps reading
    while the scope filter rejects hits) and the top k by the GIN index, then their rows
    (`thread`: as in exact_sql, the messages after a keyword hit too, each message with its
    thread's lexemes). As exact_sql's, the rows in no order, without what `finish_sql` adds."""
    scope = scope_sql(subject_id)
    vec = (
        "SELECT v.kind, v.item_id FROM unnest(%(kinds)s::text[]) AS kk(kind), LATERAL ("
        f"SELECT t.kind, t.item_id FROM memory_items t WHERE {scope} AND t.kind = kk.kind"
        " AND t.embedding IS NOT NULL ORDER BY t.embedding <=> %(vector)s::vector LIMIT %(k)s) v"
        if vector else "SELECT NULL::text, NULL::text WHERE false"
    )
    kw = (
        "SELECT w.kind, w.item_id FROM unnest(%(kinds)s::text[]) AS kk(kind), LATERAL ("
        f"SELECT t.kind, t.item_id FROM memory_items t WHERE {scope} AND t.kind = kk.kind"
        f" AND t.content_tsv @@ {_TSQUERY} ORDER BY ts_rank(t.content_tsv, {_TSQUERY}) DESC, t.item_id"
        " LIMIT %(k)s) w"
        if keyword else "SELECT NULL::text, NULL::text WHERE false"
    )
    rank = (f"CASE WHEN t.content_tsv @@ {_TSQUERY} THEN ts_rank(t.content_tsv, {_TSQUERY})::float8"
            " ELSE 0.0::float8 END" if keyword else "0.0::float8")
    follows = (
        ", fol(kind, item_id) AS MATERIALIZED (SELECT 'message'::text, m.conversation_id || ':' || (m.seq + d)"
        " FROM kw JOIN memory_items m ON m.tenant_id = %(tenant)s AND m.kind = kw.kind AND m.item_id = kw.item_id"
        f" CROSS JOIN generate_series(1, {THREAD_BACK}) d WHERE kw.kind = 'message')"
        if thread and keyword else ", fol(kind, item_id) AS (SELECT NULL::text, NULL::text WHERE false)"
    )
    return (
        f"WITH vec(kind, item_id) AS MATERIALIZED ({vec}), kw(kind, item_id) AS MATERIALIZED ({kw}){follows}"
        f" SELECT {_COLUMNS}, COALESCE(1 - (t.embedding <=> %(vector)s::vector), 0.0)::float8 AS cosine,"
        f" {rank} AS keyword_score, (t.kind, t.item_id) IN (SELECT * FROM vec) AS in_vector,"
        f" (t.kind, t.item_id) IN (SELECT * FROM kw) AS in_keyword, {_TAIL}{_THREAD_TAIL if thread else ''}"
        f" FROM memory_items t{_REPLY}{_THREAD if thread else ''}"
        " WHERE t.tenant_id = %(tenant)s AND t.content IS NOT NULL"
        " AND (t.kind <> 'message' OR t.conversation_id IS DISTINCT FROM %(conversation)s OR t.seq < %(before)s)"
        " AND (t.kind, t.item_id) IN (SELECT * FROM vec UNION SELECT * FROM kw UNION SELECT * FROM fol)"
    )


async def search_items(conn: psycopg.AsyncConnection, scope: Scope, vector: np.ndarray | str, prepared: Prepared,
                       k: int, *, kinds: Sequence[Kind] = KINDS, use_vector: bool = True,
                       use_keyword: bool = True, exact_max_items: int = EXACT_SCAN_MAX_ITEMS,
                       side: SideConnection | None = None, ef_search: int | None = None,
                       then_commit: bool = False, thread_weight: float = 0.0,
                       continued: bool = False, prescore: Prescore | None = None) -> list[SearchRow]:
    """The candidates of every kind in one statement: per kind the top k by cosine and the top
    k by ts_rank, each row with both scores (keyword_score: its IDF-weighted coverage of the
    searched lexemes), kind by kind in the order of `kinds`. A scope of at most
    `exact_max_items` items is scanned exactly; a larger one goes through the indexes, and
    there `side` (idle pooled connections, see search.search_all) searches the kinds at the
    same time, each side statement with the same HNSW settings (`ef_search`). `then_commit`:
    the transaction of `conn` ends with the statement, the COMMIT sent with it (one round trip;
    for a read whose transaction holds nothing else to do). `thread_weight` > 0: a message's
    thread counts (`_THREAD`, search.rows_with_coverage). `continued`: message rows carry the
    next turn their answer may go on in (`_CONTINUED`). `prescore`: only its `keep` best rows
    by the score PostgreSQL computes (retrieval/prescore.py), when every kind is searched in one
    statement (not across side connections) and the scope holds more items than that."""
    keywords = prepared.keywords
    keyword = use_keyword and keywords.fact is not None
    exact = prepared.scope_items <= exact_max_items
    sql = (exact_sql if exact else indexed_sql)(scope.subject_id, vector=use_vector, keyword=keyword,
                                                 thread=thread_weight > 0)
    params = {
        "tenant": scope.tenant_id, "user": scope.user_id, "subject": scope.subject_id,
        "conversation": scope.conversation_id, "before": scope.messages_before_seq, "k": k,
        "vector": vector if isinstance(vector, str) else vector_literal(vector), "keywords": keywords.fact or "",
        "lexemes": list(keywords.lexemes), "kinds": list(kinds),
    }
    weights = keywords.weights or {lexeme: 1.0 for lexeme in keywords.lexemes}
    one_statement = exact or side is None or len(kinds) < 2
    if prescore is not None and one_statement and prepared.scope_items > prescore.keep:  # else nothing to cut
        sql = best_rows_sql(sql, prescore.method, thread=thread_weight > 0, terms=len(weights))
        params.update(prescore.params(weights), **term_params(weights))
    sql = finish_sql(sql, continued)  # the surfaced turns and the continued turn, of the rows handed on only

    async def fetch(on: psycopg.AsyncConnection, of: Sequence[Kind]) -> list[SearchRow]:
        async with on.cursor(row_factory=rows_with_coverage(weights, thread_weight)) as cur:
            if then_commit and on is conn:  # the rows and the COMMIT in one round trip
                await cur.execute(one_query(on, [(sql, {**params, "kinds": list(of)}), ("COMMIT", None)]))
            else:
                await cur.execute(sql, {**params, "kinds": list(of)}, prepare=False)  # planned with the actual values
            return await cur.fetchall()

    if one_statement:
        return await fetch(conn, kinds)
    return await across_connections(conn, kinds, fetch, side, ef_search)


__all__ = ["EXACT_SCAN_MAX_ITEMS", "PREPARE_SQL", "Prepared", "exact_sql", "finish_sql", "indexed_sql", "keywords_from",
           "one_query", "prepare_items", "prepare_params", "prepared_from", "scope_sql", "search_items"]

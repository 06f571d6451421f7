"""The keyword side of the hybrid search: the query's lexemes, the learnt stop list, and an
IDF-weighted coverage score that means the same for facts, chunks and messages."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Collection, Mapping, Sequence

import psycopg

TABLES = ("facts", "conversation_chunks", "messages")


def tsquery_text(lexemes: Sequence[str], common: Collection[str] = (), max_terms: int = 32) -> str | None:
    """The query's lexemes joined with | (any may match; an AND of a whole message would match
    nothing), minus those in `common`: a lexeme found in a large share of the table matches too
    many rows to rank quickly and says little about relevance (a stop list learnt from the
    data). Quoted for tsquery input; None if empty."""
    kept = kept_lexemes(lexemes, common, max_terms)
    return " | ".join(quote(lexeme) for lexeme in kept) or None


def kept_lexemes(lexemes: Sequence[str], common: Collection[str] = (), max_terms: int = 32) -> list[str]:
    return [lexeme for lexeme in dict.fromkeys(lexemes) if lexeme and lexeme not in common][:max_terms]


def quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def idf(document_frequency: int, documents: int) -> float:
    """BM25's inverse document frequency (never negative)."""
    n = max(documents, document_frequency, 1)
    return math.log(1.0 + (n - document_frequency + 0.5) / (document_frequency + 0.5))


def coverage(matched: Collection[str], weights: Mapping[str, float], total: float | None = None) -> float:
    """The share of the query's information a row contains: the IDF of the query lexemes it
    matches over the IDF of all of them (0..1). Unlike ts_rank it knows that "lgbtq" says more
    than "group", and unlike a raw BM25 sum it does not depend on the table or the row's
    length, so a message, a chunk and a fact that match the same words score the same.
    `total`: sum(weights.values()), if the caller scores many rows with the same weights."""
    total = sum(weights.values()) if total is None else total
    if total <= 0:
        return 0.0
    return sum(weights.get(lexeme, 0.0) for lexeme in set(matched)) / total


@dataclass(frozen=True)
class Keywords:
    """Per table, the tsquery text to search with (None: no keyword search), and the IDF of
    every searched lexeme (one weight per lexeme for all tables: the scores stay comparable)."""

    fact: str | None = None
    chunk: str | None = None
    message: str | None = None
    lexemes: tuple[str, ...] = ()
    weights: Mapping[str, float] = field(default_factory=dict)

    def for_kind(self, kind: str) -> str | None:
        return getattr(self, kind)


_COMMON = (
    "SELECT s.tablename, c.e FROM pg_stats s,"
    " unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS c(e, f)"
    " WHERE s.schemaname = current_schema() AND s.attname = 'content_tsv'"
    " AND s.tablename = ANY(%s) AND c.e IS NOT NULL AND c.f > %s"
)


class CommonLexemes:
    """Per table, the lexemes found in more than `max_doc_fraction` of its rows, from ANALYZE's
    statistics (most_common_elems; none before the first ANALYZE), re-read every `ttl_s`.
    One per app: the statistics query costs more than the rest of `prepare`.
    It also keeps each (tenant, lexeme)'s document frequency for `idf_ttl_s` (0: not kept),
    so a word asked about again within that time costs no count (docs/retrieval.md)."""

    MAX_FREQUENCIES = 20_000  # cached (tenant, lexeme) pairs; past it the cache starts over

    def __init__(self, max_doc_fraction: float, ttl_s: float = 60.0, idf_ttl_s: float = 0.0) -> None:
        self.max_doc_fraction, self.ttl_s, self.idf_ttl_s = max_doc_fraction, ttl_s, idf_ttl_s
        self._value: dict[str, frozenset[str]] | None = None
        self._expires = 0.0
        self._frequencies: dict[tuple[str, str], tuple[int, int, float]] = {}  # -> (df, documents, expires)

    def frequencies(self, tenant: str, lexemes: Sequence[str], now: float) -> dict[str, tuple[int, int]]:
        """The cached (document frequency, documents) of those lexemes still fresh at `now`."""
        found = {}
        for lexeme in lexemes:
            entry = self._frequencies.get((tenant, lexeme))
            if entry is not None and now < entry[2]:
                found[lexeme] = entry[:2]
        return found

    def remember(self, tenant: str, counted: Mapping[str, tuple[int, int]], now: float) -> None:
        if self.idf_ttl_s <= 0 or not counted:
            return
        if len(self._frequencies) + len(counted) > self.MAX_FREQUENCIES:
            self._frequencies.clear()
        for lexeme, (df, documents) in counted.items():
            self._frequencies[(tenant, lexeme)] = (df, documents, now + self.idf_ttl_s)

    async def get(self, conn: psycopg.AsyncConnection, now: float) -> dict[str, frozenset[str]]:
        """`now`: a monotonic clock reading."""
        if self._value is None or now >= self._expires:
            found: dict[str, set[str]] = {table: set() for table in TABLES}
            cur = await conn.execute(_COMMON, (list(TABLES), self.max_doc_fraction))
            for table, lexeme in await cur.fetchall():
                found[table].add(lexeme)
            self._value = {table: frozenset(lexemes) for table, lexemes in found.items()}
            self._expires = now + self.ttl_s
        return self._value


def frequencies_sql(cap: int) -> str:
    """Per lexeme, its document frequency in the tenant's rows of the three tables (each count
    capped: a GIN lookup of a rare word is cheap, a common one is cut short), and the tables'
    estimated sizes (pg_class.reltuples, -1 before the first ANALYZE)."""
    counts = " + ".join(
        f"(SELECT count(*) FROM (SELECT 1 FROM {table} t WHERE t.tenant_id = %(tenant)s"
        f" AND t.content_tsv @@ q.query LIMIT {int(cap)}) x)" for table in TABLES)
    sizes = " + ".join(f"greatest((SELECT reltuples FROM pg_class WHERE oid = to_regclass('{table}')), 0)"
                       for table in TABLES)
    return (f"SELECT q.lexeme, {counts} AS df, ({sizes})::float8 AS n"
            " FROM unnest(%(lexemes)s::text[], %(queries)s::text[]) AS u(lexeme, text),"
            " LATERAL (SELECT u.lexeme, u.text::tsquery AS query) q")


async def idf_weights(conn: psycopg.AsyncConnection, tenant: str, lexemes: Sequence[str],
                      cap: int = 5000, cache: CommonLexemes | None = None) -> dict[str, float]:
    """IDF of each lexeme over the tenant's facts, chunks and messages together; the counts
    of lexemes `cache` holds are taken from it, the others counted (and kept there)."""
    if not lexemes:
        return {}
    now = time.monotonic()
    known = cache.frequencies(tenant, lexemes, now) if cache is not None else {}
    missing = [lexeme for lexeme in lexemes if lexeme not in known]
    counted: dict[str, tuple[int, int]] = {}
    if missing:
        cur = await conn.execute(frequencies_sql(cap), {
            "tenant": tenant, "lexemes": missing, "queries": [quote(lexeme) for lexeme in missing]},
            prepare=False)
        counted = {lexeme: (int(df), int(n)) for lexeme, df, n in await cur.fetchall()}
        if cache is not None:
            cache.remember(tenant, counted, now)
    frequencies = {**known, **counted}
    documents = max([n for _, n in frequencies.values()] + [df for df, _ in frequencies.values()] + [1])
    return {lexeme: idf(frequencies[lexeme][0], documents) for lexeme in lexemes if lexeme in frequencies}

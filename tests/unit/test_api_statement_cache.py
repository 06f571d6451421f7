"""The API lets psycopg keep the parse of its long statements (api.app.cache_long_statements)."""

from psycopg import _queries
from psycopg.adapt import Transformer

from api.app import CACHED_STATEMENT_BYTES, cache_long_statements
from retrieval.items import best_rows_sql, exact_sql, finish_sql, indexed_sql


def test_the_search_statements_parse_is_kept_and_reused():
    cache_long_statements()
    assert _queries.MAX_CACHED_STATEMENT_LENGTH >= CACHED_STATEMENT_BYTES
    for search in (exact_sql, indexed_sql):
        for subject in (None, "s1"):
            sql = finish_sql(best_rows_sql(search(subject, vector=True, keyword=True, thread=True), "hybrid",
                                           thread=True), True)
            assert 4096 < len(sql.encode()) <= CACHED_STATEMENT_BYTES  # past psycopg's own bound, within ours
    params = {name: None for name in _queries._query2pg_client_nocache(sql.encode(), "utf-8")[1]}
    for _ in range(2):
        _queries.PostgresClientQuery(Transformer()).convert(sql, params)
    hits = _queries._query2pg_client.cache_info().hits
    _queries.PostgresClientQuery(Transformer()).convert(sql, params)  # as mogrify does for every context
    assert _queries._query2pg_client.cache_info().hits == hits + 1


def test_the_search_statement_with_the_most_searched_terms_is_kept_too():
    """The search statement's coverage is unrolled a term at a time (retrieval.prescore.
    unrolled_coverage_sql: two parameters a term): with many searched lexemes it has more
    parameters than psycopg's own bound on a kept parse (`MAX_CACHED_STATEMENT_PARAMS`, 50 in
    psycopg 3.3), and the parse was made again for every such context."""
    from core.settings import RetrievalSettings

    cache_long_statements()
    terms = RetrievalSettings().keyword_max_terms
    sql = finish_sql(best_rows_sql(exact_sql("s1", vector=True, keyword=True, thread=True), "hybrid", thread=True,
                                   terms=terms), True)
    params = {name: None for name in _queries._query2pg_client_nocache(sql.encode(), "utf-8")[1]}
    assert len(params) > 50  # past psycopg's own bound on parameters
    _queries.PostgresClientQuery(Transformer()).convert(sql, params)
    hits = _queries._query2pg_client.cache_info().hits
    _queries.PostgresClientQuery(Transformer()).convert(sql, params)
    assert _queries._query2pg_client.cache_info().hits == hits + 1


def test_without_psycopgs_private_module_the_api_still_starts(monkeypatch):
    """psycopg._queries is private: a patch release that moves it costs the cache, never the
    API's start (create_app calls cache_long_statements)."""
    import sys

    monkeypatch.setitem(sys.modules, "psycopg._queries", None)  # an import of it raises ImportError
    monkeypatch.delattr("psycopg._queries", raising=False)
    cache_long_statements()

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

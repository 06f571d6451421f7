"""psycopg's client-side parse of the context's search statement, with psycopg's own bound on a
kept parse's parameters (50) against the API's (api.app.cache_long_statements), alternated in
one process; and what psycopg's LRU holds with the largest search statements (review12,
docs/retrieval.md "Eleventh round, the API").

    python -m bench.statement_parse_bench [--rounds 5] [--repeat 200]
"""

from __future__ import annotations

import argparse
import re
import time
import tracemalloc

from psycopg import _queries
from psycopg.adapt import Transformer

from api.app import CACHED_STATEMENT_PARAMS, cache_long_statements
from retrieval.items import best_rows_sql, exact_sql, finish_sql, indexed_sql


def search_sql(terms: int, subject: str | None = "s1", search=exact_sql) -> str:
    return finish_sql(best_rows_sql(search(subject, vector=True, keyword=True, thread=True), "hybrid", thread=True,
                                    terms=terms), True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    cache_long_statements()
    for terms in (4, 12, 16, 32):
        sql = search_sql(terms)
        params = {name: "x" for name in set(re.findall(r"%\((\w+)\)s", sql))}
        best = {50: float("inf"), CACHED_STATEMENT_PARAMS: float("inf")}
        for _ in range(args.rounds):
            for bound in best:  # psycopg's bound, then the API's
                _queries.MAX_CACHED_STATEMENT_PARAMS = bound
                _queries.PostgresClientQuery(Transformer()).convert(sql, params)
                started = time.perf_counter()
                for _ in range(args.repeat):
                    _queries.PostgresClientQuery(Transformer()).convert(sql, params)  # as mogrify does
                best[bound] = min(best[bound], (time.perf_counter() - started) / args.repeat * 1e6)
        print(f"{terms:2d} lexemes, {len(params)} parameters: convert µs best of {args.rounds}x{args.repeat}:"
              f" bound 50 {best[50]:.0f}, bound {CACHED_STATEMENT_PARAMS} {best[CACHED_STATEMENT_PARAMS]:.0f}")
    _queries.MAX_CACHED_STATEMENT_PARAMS = CACHED_STATEMENT_PARAMS
    _queries._query2pg_client.cache_clear()
    tracemalloc.start()
    shapes = 0
    for terms in range(33):
        for subject in (None, "s1"):
            for search in (exact_sql, indexed_sql):
                _queries._query2pg_client(search_sql(terms, subject, search).encode(), "utf-8")
                shapes += 1
    held = tracemalloc.get_traced_memory()[0]
    print(f"{shapes} shapes (0-32 lexemes, exact/indexed, with and without a subject): LRU"
          f" {_queries._query2pg_client.cache_info().currsize} parses, {held / 1e6:.1f} MB (tracemalloc)")


if __name__ == "__main__":
    main()

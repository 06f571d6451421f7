"""What the erasure's deletion from the embedding cache costs (docs/lineage.md, "Vectors"):
computing the cache keys of the erased texts (every known document prefix, the message index's
cut) and the `DELETE ... WHERE text_sha256 = ANY(keys)` on a cache of `--cache` rows, for an
erasure of `--texts` texts (messages plus derived texts).

    python -m bench.erasure_vectors_bench [--cache 200000] [--texts 1000]

Runs on a copy of public.embedding_cache's shape in a throwaway schema (dropped at the end);
every delete is rolled back. Best of 7; the machine may be shared (best-of is the figure to trust)."""

from __future__ import annotations

import argparse
import os
import platform
import time
import uuid

import psycopg

from bench.common import bench_settings
from projections.erasure import embedding_cache_keys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", type=int, default=200_000, help="rows in the cache")
    parser.add_argument("--texts", type=int, default=1000, help="texts the erasure erases or deletes")
    args = parser.parse_args()
    settings = bench_settings("vectors")
    schema = f"bench_vec_{uuid.uuid4().hex[:8]}"
    texts = [f"message {i} of the erased user, with some words: {os.urandom(8).hex()}" for i in range(args.texts)]
    key_times = []
    for _ in range(7):
        started = time.perf_counter()
        keys = embedding_cache_keys(texts, None)
        key_times.append(time.perf_counter() - started)
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            conn.execute(f'CREATE TABLE "{schema}".cache (LIKE public.embedding_cache INCLUDING ALL)')
            # Rows of other texts, plus the erased ones under one prefix (what an erasure finds).
            conn.execute(f'INSERT INTO "{schema}".cache (model, dimensions, text_sha256, vector) SELECT \'m\', 384,'
                         " sha256(g::text::bytea), decode(repeat('00', 1536), 'hex') FROM generate_series(1, %s) g",
                         (args.cache,))
            hit = keys[::len(keys) // args.texts]
            conn.execute(f'INSERT INTO "{schema}".cache (model, dimensions, text_sha256, vector) SELECT \'m\', 384, k,'
                         " decode(repeat('00', 1536), 'hex') FROM unnest(%s::bytea[]) k ON CONFLICT DO NOTHING", (hit,))
            conn.execute(f'ANALYZE "{schema}".cache')
            times = []
            for _ in range(7):
                with conn.transaction(force_rollback=True):
                    started = time.perf_counter()
                    deleted = conn.execute(f'DELETE FROM "{schema}".cache WHERE text_sha256 = ANY(%s)', (keys,)).rowcount
                    times.append(time.perf_counter() - started)
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    print(f"{platform.node()} {platform.platform()} cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
    print(f"cache {args.cache} rows, {args.texts} texts -> {len(keys)} keys ({deleted} rows found):"
          f" keys {min(key_times) * 1000:.1f} ms, delete {min(times) * 1000:.1f} ms (best of 7)")


if __name__ == "__main__":
    main()

"""The floor a batch replay cannot go under: building the vector index of its items.

A batch replay drops `memory_items`' HNSW index while it loads and builds it once at the end
(`memory_agent/batch_replay`, `DEFERRED_INDEXES`, with `window.replay_index_build_workers`
parallel workers). Every message is an item with a vector (the message index), so a replay of N
messages builds a graph of at least N vectors. This script builds that graph alone, with the
migration's parameters, the replay's `maintenance_work_mem` and worker counts, on N synthetic
vectors (clustered like text vectors: 200 random centres plus noise, normalised), and prints the
build's wall time, the server's CPU and the ceiling it puts on a replay's events a second.

    python -m bench.index_build_floor --vectors 20000 100000 --workers 0 1

Needs a PostgreSQL with pgvector on this machine (`MEMORY_POSTGRES__DSN`); the table is
unlogged, in its own schema, and dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import numpy as np
import psycopg
from psycopg import sql

from bench.common import postmaster_pid, server_cpu_ms
from core.settings import get_settings
from memory_agent.batch_replay import _BUILD_MEMORY, DEFERRED_INDEXES

SCHEMA = "bench_index_floor"


def vectors(count: int, dims: int = 384, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(200, dims)).astype(np.float32)
    rows = centres[rng.integers(0, len(centres), count)] + 0.6 * rng.normal(size=(count, dims)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def load(conn: psycopg.Connection, rows: np.ndarray) -> None:
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
    conn.execute(sql.SQL("CREATE UNLOGGED TABLE {}.memory_items (id int, embedding vector({}))").format(
        sql.Identifier(SCHEMA), sql.Literal(rows.shape[1])))
    with conn.cursor().copy(sql.SQL("COPY {}.memory_items (id, embedding) FROM STDIN").format(
            sql.Identifier(SCHEMA))) as copy:
        for number, row in enumerate(rows):
            copy.write_row((number, "[" + ",".join(f"{x:.6f}" for x in row) + "]"))


def build(conn: psycopg.Connection, workers: int, postmaster: int | None) -> tuple[float, float | None]:
    conn.execute(sql.SQL("DROP INDEX IF EXISTS {}.floor_embedding").format(sql.Identifier(SCHEMA)))
    conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(_BUILD_MEMORY)))
    conn.execute(sql.SQL("SET max_parallel_maintenance_workers = {}").format(sql.Literal(workers)))
    _, _, rest = DEFERRED_INDEXES["memory_items_embedding"].partition(" ")
    cpu = server_cpu_ms(postmaster) if postmaster else None
    clock = time.perf_counter()
    conn.execute(sql.SQL("CREATE INDEX floor_embedding ON {}.memory_items {}").format(
        sql.Identifier(SCHEMA), sql.SQL(rest)))
    wall = time.perf_counter() - clock
    return wall, (server_cpu_ms(postmaster) - cpu) / 1000 if postmaster else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1],
                        help="parallel maintenance workers (the replay's default is"
                             " window.replay_index_build_workers)")
    args = parser.parse_args()
    settings = get_settings()
    postmaster = asyncio.run(postmaster_pid(settings))
    print(f"load average at start: {os.getloadavg()[0]:.1f}; server CPU "
          f"{'measured' if postmaster else 'not measurable (not on this machine)'}")
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        try:
            for count in args.vectors:
                load(conn, vectors(count))
                for workers in args.workers:
                    wall, cpu = build(conn, workers, postmaster)
                    cpu_text = f"{cpu:.1f} CPU-s" if cpu is not None else "CPU not measured"
                    print(f"{count:>9,} vectors, {workers} parallel workers: {wall:6.1f} s wall, {cpu_text};"
                          f" a replay of {count:,} messages can reach at most {count / wall:,.0f} events/s"
                          f" (load {os.getloadavg()[0]:.1f})", flush=True)
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))


if __name__ == "__main__":
    main()

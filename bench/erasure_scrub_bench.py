"""What the erasure's scrub costs (docs/security.md, "Erasure on disk"): how long `VACUUM (FULL,
ANALYZE)` of a `messages` table of N rows takes after one user's messages were deleted, and what
a reader of that table sees meanwhile (its reads wait for the rewrite's ACCESS EXCLUSIVE lock).

    python -m bench.erasure_scrub_bench [--rows 10000 100000 1000000]

Per size: a throwaway generation schema (the real migrations: indexes, triggers), N messages of
~300 characters in 1,000 conversations, 1 % of them deleted (one user's), one scrub round
(projections/scrub.py: the rewrite, pg_statistic, pg_switch_wal, CHECKPOINT) while a reader
loops over the table's primary key, one conversation per query. Prints the round's time, each
rewrite's, the reader's p50 and max latency before and during the round. The schema is dropped
at the end. Run it against a server of its own (the CHECKPOINT is the server's)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import psycopg

from bench.common import bench_settings, drop, machine
from projections.migrate import migrate
from projections.scrub import scrub_once

TEXT = "The quick brown fox jumps over the lazy dog while the memory agent keeps notes. " * 4


async def fill(conn: psycopg.AsyncConnection, rows: int) -> None:
    await conn.execute(
        "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, occurred_at,"
        " source_partition, source_offset) SELECT 't', 'c' || (g %% 1000), g / 1000, 'e' || g,"
        " CASE WHEN g %% 100 = 0 THEN 'erased' ELSE 'u' || (g %% 97) END, 'user', %s || g, now(), 0, g"
        " FROM generate_series(0, %s - 1) g", (TEXT, rows))


async def reader(dsn: str, schema: str, stop: asyncio.Event, latencies: list[tuple[float, float]]) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, options=f"-c search_path={schema},public",
                                                     autocommit=True) as conn:
        i = 0
        while not stop.is_set():
            begin = time.perf_counter()
            await conn.execute("SELECT seq, content FROM messages WHERE tenant_id = 't' AND conversation_id = %s"
                               " ORDER BY seq LIMIT 20", (f"c{i % 1000}",))
            latencies.append((begin, time.perf_counter() - begin))
            i += 1
            await asyncio.sleep(0.005)


def summary(latencies: list[float]) -> str:
    if not latencies:
        return "no reads"
    p50, top = statistics.median(latencies) * 1000, max(latencies) * 1000
    return f"p50 {p50:.1f} ms, max {top:.1f} ms ({len(latencies)} reads)"


async def measure(rows: int) -> None:
    settings = bench_settings(f"scrub{rows}")
    await asyncio.to_thread(migrate, settings)
    dsn, schema = settings.postgres.dsn, settings.pg_schema
    try:
        async with await psycopg.AsyncConnection.connect(dsn, options=f"-c search_path={schema},public",
                                                         autocommit=True) as conn:
            await fill(conn, rows)
            await conn.execute("DELETE FROM messages WHERE user_id = 'erased'")
            await conn.execute("INSERT INTO erasure_scrubs (erasure_event_id, table_name)"
                               " VALUES ('bench', format('%%I.%%I', %s::text, 'messages'))", (schema,))
            [(size,)] = await (await conn.execute("SELECT pg_total_relation_size('messages')")).fetchall()
            stop, latencies = asyncio.Event(), []
            task = asyncio.create_task(reader(dsn, schema, stop, latencies))
            await asyncio.sleep(2)
            begin = time.perf_counter()
            rewritten = await scrub_once(conn)
            end = time.perf_counter()
            await asyncio.sleep(0.5)
            stop.set()
            await task
        before = [d for t, d in latencies if t < begin]
        during = [d for t, d in latencies if begin <= t <= end]
        rewrites = ", ".join(f"{t.rsplit('.', 1)[-1]} {s:.2f} s" for t, s in rewritten.items())
        print(f"{rows:>9,} rows, {size / 2**20:,.0f} MiB: round {end - begin:.2f} s (rewrites: {rewrites}); "
              f"reads before: {summary(before)}; during: {summary(during)}")
    finally:
        await drop(settings)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for rows in args.rows:
        await measure(rows)


if __name__ == "__main__":
    asyncio.run(main())

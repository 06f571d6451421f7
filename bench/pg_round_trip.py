"""One PostgreSQL round trip's CPU through two DSNs, alternated: the client's (this process,
psycopg async, `SELECT 1` not prepared) and the backend's (from /proc, so a server on this
machine), e.g. TCP on loopback against the Unix socket (docs/retrieval.md, "Eleventh round, the
socket and the lexemes").

    python bench/pg_round_trip.py postgresql://postgres@127.0.0.1:15432/memory_agent \
        "postgresql://postgres@/memory_agent?host=$PWD/.state/postgres/run&port=15432"
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import psycopg

TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_ms(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICKS


async def round_trips(dsn: str, n: int) -> tuple[float, float, float]:
    """Wall, client CPU and backend CPU, in µs a round trip, over `n` of them."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        backend = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
        for _ in range(200):  # warm up
            await conn.execute("SELECT 1")
        wall, mine, theirs = time.perf_counter(), time.process_time(), process_cpu_ms(backend)
        for _ in range(n):
            await (await conn.execute("SELECT 1", prepare=False)).fetchone()
        return ((time.perf_counter() - wall) / n * 1e6, (time.process_time() - mine) / n * 1e6,
                (process_cpu_ms(backend) - theirs) / n * 1e3)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dsn", nargs="+")
    parser.add_argument("--round-trips", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} at start")
    for round_ in range(args.rounds):
        for dsn in args.dsn:
            wall, client, backend = await round_trips(dsn, args.round_trips)
            print(f"round {round_} {dsn}: wall {wall:.0f} µs, client CPU {client:.1f} µs,"
                  f" backend CPU {backend:.1f} µs a round trip", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    asyncio.run(main())

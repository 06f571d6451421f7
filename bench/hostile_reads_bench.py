"""Hostile reads against the real API + PostgreSQL: what another tenant sees meanwhile.

    python -m bench.hostile_reads_bench [--hostile 10] [--seconds 10]

1. the old missing-seqs query shape (a generate_series over the range) timed on a 1M range,
   to show what `?min_seq=2147483647` cost before (it grows linearly: x2147 for the full range);
2. `--hostile` clients of tenant A looping `?min_seq=2147483647&wait_ms=60000` (answered at once now);
3. the same clients with `min_seq` just ahead of the conversation (each waits `max_wait_ms`
   holding a pooled connection: the per-tenant share keeps the others' connections free);
while one client of tenant B reads its context in a loop. Latencies, status codes.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from datetime import UTC, datetime

import httpx
import psycopg
import uvicorn

from api.app import create_app
from bench.common import bench_settings, drop, percentile, prepare, report
from core.settings import ApiSettings

KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}


async def seed(settings, tenant: str, cid: str, messages: int) -> None:
    now = datetime.now(UTC)
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        await conn.execute("INSERT INTO conversations (tenant_id, conversation_id, user_id, last_seq, message_count)"
                           " VALUES (%s, %s, 'u', %s, %s)", (tenant, cid, messages - 1, messages))
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, occurred_at,"
                " source_partition, source_offset) VALUES (%s, %s, %s, %s, 'u', 'user', %s, %s, 0, %s)",
                [(tenant, cid, s, f"{tenant}-{cid}-{s}", f"message {s}", now, s) for s in range(messages)])


async def old_query_ms(settings, range_size: int) -> float:
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        started = time.perf_counter()
        await conn.execute(
            "SELECT s FROM generate_series(%s::int, %s::int) AS s WHERE NOT EXISTS (SELECT 1 FROM messages"
            " WHERE tenant_id = 'tenant-a' AND conversation_id = 'a' AND seq = s) ORDER BY s LIMIT 1000",
            (200, 200 + range_size))
        return (time.perf_counter() - started) * 1000


async def storm(base: str, hostile: int, seconds: float, params: dict) -> dict:
    stop = time.monotonic() + seconds
    hostile_ms, other_ms, codes = [], [], Counter()

    async def attacker(http: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            started = time.perf_counter()
            response = await http.get("/v1/conversations/a/context", params=params, headers={"X-API-Key": "key-a"})
            hostile_ms.append((time.perf_counter() - started) * 1000)
            codes[f"A {response.status_code}"] += 1

    async def other(http: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            started = time.perf_counter()
            response = await http.get("/v1/conversations/b/context", headers={"X-API-Key": "key-b"})
            other_ms.append((time.perf_counter() - started) * 1000)
            codes[f"B {response.status_code}"] += 1

    async with httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=hostile + 5)) as http:
        await asyncio.gather(*(attacker(http) for _ in range(hostile)), other(http))
    return {
        "tenant A requests": len(hostile_ms),
        "tenant A p50 / max ms": f"{percentile(hostile_ms, 50):.0f} / {max(hostile_ms):.0f}",
        "tenant B requests": len(other_ms),
        "tenant B p50 / p99 / max ms": f"{percentile(other_ms, 50):.0f} / {percentile(other_ms, 99):.0f}"
                                       f" / {max(other_ms):.0f}",
        "status codes": dict(sorted(codes.items())),
    }


async def main(hostile: int, seconds: float) -> None:
    settings = bench_settings("hostile", api=ApiSettings(api_keys=KEYS))
    await prepare(settings)
    try:
        await seed(settings, "tenant-a", "a", 200)
        await seed(settings, "tenant-b", "b", 20)
        results = {"old query shape, 1M-seq range (ms)": f"{await old_query_ms(settings, 1_000_000):.0f}"}
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="warning"))
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        try:
            far = await storm(base, hostile, seconds, {"min_seq": 2**31 - 1, "wait_ms": 60_000})
            results |= {f"min_seq=2147483647: {k}": v for k, v in far.items()}
            near = await storm(base, hostile, seconds, {"min_seq": 200, "wait_ms": 60_000})
            results |= {f"min_seq just ahead (waits {settings.api.max_wait_ms} ms): {k}": v for k, v in near.items()}
        finally:
            server.should_exit = True
            await task
        report(f"hostile reads: {hostile} clients of tenant A, one of tenant B, {seconds:g} s each", results)
    finally:
        await drop(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostile", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(main(args.hostile, args.seconds))

"""A flood of erasure requests for one user against the real API + PostgreSQL + Kafka, with the
projectors applying them: what another tenant's reads cost meanwhile.

    python -m bench.erasure_flood_bench [--requests 200] [--seconds 3]

Tenant A's user `alice` has a conversation; tenant B's client reads its context in a loop,
first alone (`--seconds`), then while `--requests` DELETE /v1/users/alice (alice's own key) are
sent over `--seconds`. Reports tenant B's latencies both times, the answers to the flood, how
many distinct erasure events it appended, and how many the erasure projector applied.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from collections import Counter
from datetime import UTC, datetime

import httpx
import psycopg

from bench.common import bench_settings, child_env, drop, percentile, prepare, report, scalar, worker
from core.settings import ApiSettings

KEYS = {"alice-key": {"tenant": "tenant-a", "user": "alice"}, "key-b": {"tenant": "tenant-b", "act_as": "any_user"}}


async def seed(settings, tenant: str, cid: str, user: str, messages: int) -> None:
    now = datetime.now(UTC)
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        await conn.execute("INSERT INTO conversations (tenant_id, conversation_id, user_id, last_seq, message_count)"
                           " VALUES (%s, %s, %s, %s, %s)", (tenant, cid, user, messages - 1, messages))
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, occurred_at,"
                " source_partition, source_offset) VALUES (%s, %s, %s, %s, %s, 'user', %s, %s, 0, %s)",
                [(tenant, cid, s, f"{tenant}-{cid}-{s}", user, f"message {s}", now, s) for s in range(messages)])


async def reads_of_b(http: httpx.AsyncClient, stop: float) -> list[float]:
    took = []
    while time.monotonic() < stop:
        started = time.perf_counter()
        answer = await http.get("/v1/conversations/b/context", headers={"X-API-Key": "key-b"})
        answer.raise_for_status()
        took.append((time.perf_counter() - started) * 1000)
    return took


async def flood(http: httpx.AsyncClient, requests: int, seconds: float) -> tuple[Counter, set[str]]:
    codes, events = Counter(), set()

    async def one(delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            answer = await http.delete("/v1/users/alice", headers={"X-API-Key": "alice-key"})
        except httpx.TransportError as exc:
            codes[type(exc).__name__] += 1
            return
        codes[answer.status_code] += 1
        if answer.status_code == 202:
            events.add(answer.json()["event_id"])

    await asyncio.gather(*(one(seconds * i / requests) for i in range(requests)))
    return Counter({str(k): v for k, v in codes.items()}), events


def summary(took: list[float]) -> str:
    return (f"{len(took)} reads, p50 {percentile(took, 50):.0f} / p99 {percentile(took, 99):.0f}"
            f" / max {max(took):.0f} ms")


async def main(requests: int, seconds: float) -> None:
    settings = bench_settings("erasureflood", api=ApiSettings(api_keys=KEYS))
    await prepare(settings)
    try:
        await seed(settings, "tenant-a", "a", "alice", 200)
        await seed(settings, "tenant-b", "b", "bob", 20)
        projectors = worker(settings, "--projectors-only")  # separate processes, as deployed
        await projectors.__aenter__()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        api = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memory_agent.cli", "api", "--port", str(port),
            env=child_env(settings, {"MEMORY_API__API_KEYS": json.dumps(KEYS)}))
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=base, timeout=5) as probe_http:
                for _ in range(600):
                    try:
                        if (await probe_http.get("/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.2)
            async with httpx.AsyncClient(base_url=base, timeout=120,
                                         limits=httpx.Limits(max_connections=requests + 5)) as http:
                await reads_of_b(http, time.monotonic() + 1)  # warm up
                alone = await reads_of_b(http, time.monotonic() + seconds)
                # B reads during the flood and for as long again after it (the projector's work).
                during, (codes, events) = await asyncio.gather(
                    reads_of_b(http, time.monotonic() + 2 * seconds), flood(http, requests, seconds))
            deadline = time.monotonic() + 120
            applied = 0
            while time.monotonic() < deadline:
                applied = await scalar(settings, "SELECT count(*) FROM erasures")
                if applied >= len(events):
                    break
                await asyncio.sleep(0.5)
        finally:
            api.terminate()
            await api.wait()
            await projectors.__aexit__(None, None, None)
        report(f"erasure flood: {requests} DELETE /v1/users/alice over {seconds:g} s, tenant B reading", {
            "tenant B alone": summary(alone),
            "tenant B during the flood (and as long after)": summary(during),
            "answers to the flood": dict(sorted(codes.items())),
            "distinct erasure events appended": len(events),
            "erasures applied by the projector": applied,
        })
    finally:
        await drop(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.seconds))

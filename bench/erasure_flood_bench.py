"""A flood of erasure requests from one tenant against the real API + PostgreSQL + Kafka, with
the projectors applying them: what another tenant's reads and memory cost meanwhile.

    python -m bench.erasure_flood_bench [--requests 200] [--seconds 3] [--users 1]

Tenant A has `--users` users (each with a conversation of 200 messages); tenant B's client
reads its context in a loop and appends a message to its conversation in another loop, timing
how long each takes to be projected (its memory), first alone (2 × `--seconds`), then while
`--requests` DELETE /v1/users/<a user of A> (each user's own key, the users in turn) are sent
over `--seconds` and until every erasure appended is applied (at least as long again after).
`--users 1`: one user erased over and over (the API collapses repeats); more: distinct users,
each a real erasure. Reports tenant B's latencies both times and their ratios, the answers to
the flood, how many erasure events it appended, how many the erasure projector applied, and
how long that took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import psycopg

from bench.common import bench_settings, child_env, drop, percentile, prepare, report, scalar, worker
from core.settings import ApiSettings

def keys(users: int) -> dict:
    return {f"a{i}-key": {"tenant": "tenant-a", "user": f"a{i}"} for i in range(users)} | {
        "key-b": {"tenant": "tenant-b", "act_as": "any_user"}}


async def seed(settings, tenant: str, cid: str, user: str, messages: int) -> None:
    """Rows as the messages projector writes them, at log positions before any record (negative
    offsets: an erasure's scope, bounded on the log, covers them as it covers real ones)."""
    now = datetime.now(UTC)
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        await conn.execute("INSERT INTO conversations (tenant_id, conversation_id, user_id, last_seq, message_count)"
                           " VALUES (%s, %s, %s, %s, %s)", (tenant, cid, user, messages - 1, messages))
        async with conn.cursor() as cur, cur.copy(
                "COPY messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, occurred_at,"
                " source_partition, source_offset) FROM STDIN") as copy:
            for s in range(messages):
                await copy.write_row((tenant, cid, s, f"{tenant}-{cid}-{s}", user, "user",
                                      f"message {s} of {user}, some words to fill a page", now, 0, -1 - s))


async def reads_of_b(http: httpx.AsyncClient, going: Callable[[], bool]) -> list[float]:
    took = []
    while going():
        started = time.perf_counter()
        answer = await http.get("/v1/conversations/b/context", headers={"X-API-Key": "key-b"})
        answer.raise_for_status()
        took.append((time.perf_counter() - started) * 1000)
    return took


class Writer:
    """Tenant B appends to its conversation, one message at a time, and times each until the
    messages projector has written it (B's memory as fresh as the log)."""

    def __init__(self, settings, first_seq: int) -> None:
        self.settings, self.seq = settings, first_seq

    async def writes_of_b(self, http: httpx.AsyncClient, going: Callable[[], bool]) -> list[float]:
        took = []
        async with await psycopg.AsyncConnection.connect(
            self.settings.postgres.dsn, options=f"-c search_path={self.settings.pg_schema},public",
            autocommit=True,
        ) as conn:
            while going():
                started = time.perf_counter()
                answer = await http.post("/v1/conversations/b/messages", headers={"X-API-Key": "key-b"}, json={
                    "user_id": "bob", "seq": self.seq, "role": "user", "content": f"bob says {self.seq}"})
                answer.raise_for_status()
                while not await (await conn.execute(
                        "SELECT 1 FROM messages WHERE tenant_id = 'tenant-b' AND conversation_id = 'b' AND seq = %s",
                        (self.seq,))).fetchone():
                    await asyncio.sleep(0.01)
                took.append((time.perf_counter() - started) * 1000)
                self.seq += 1
        return took


async def flood(http: httpx.AsyncClient, requests: int, seconds: float, users: int) -> tuple[Counter, set[str]]:
    codes, events = Counter(), set()

    async def one(i: int) -> None:
        await asyncio.sleep(seconds * i / requests)
        user = f"a{i % users}"
        try:
            answer = await http.delete(f"/v1/users/{user}", headers={"X-API-Key": f"{user}-key"})
        except httpx.TransportError as exc:
            codes[type(exc).__name__] += 1
            return
        codes[answer.status_code] += 1
        if answer.status_code == 202:
            events.add(answer.json()["event_id"])

    await asyncio.gather(*(one(i) for i in range(requests)))
    return Counter({str(k): v for k, v in codes.items()}), events


def summary(took: list[float]) -> str:
    return (f"{len(took)} samples, p50 {percentile(took, 50):.0f} / p99 {percentile(took, 99):.0f}"
            f" / max {max(took):.0f} ms")


def ratio(during: list[float], alone: list[float]) -> str:
    return (f"p50 x{percentile(during, 50) / percentile(alone, 50):.2f}, p99 x{percentile(during, 99) / percentile(alone, 99):.2f},"
            f" max x{max(during) / max(alone):.2f}")


async def b_meanwhile(http, writer: Writer, seconds: float) -> tuple[list[float], list[float]]:
    stop = time.monotonic() + seconds

    def going() -> bool:
        return time.monotonic() < stop
    return await asyncio.gather(reads_of_b(http, going), writer.writes_of_b(http, going))


class Until:
    """A deadline that moves: at least `seconds`, then until every erasure the flood appended
    is applied (at most `limit_s`)."""

    def __init__(self, settings, seconds: float, limit_s: float = 300) -> None:
        self.settings, self.start = settings, time.monotonic()
        self.min_end, self.limit = self.start + seconds, self.start + limit_s
        self.events: set[str] | None = None  # the flood's, once it is over
        self.applied = 0

    async def watch(self) -> None:
        while time.monotonic() < self.limit:
            if self.events is not None:
                self.applied = await scalar(self.settings, "SELECT count(*) FROM erasures")
                if self.applied >= len(self.events) and time.monotonic() >= self.min_end:
                    return
            await asyncio.sleep(0.2)


async def b_until_applied(http, writer: Writer, until: Until) -> tuple[list[float], list[float]]:
    watching = asyncio.create_task(until.watch())

    def going() -> bool:
        return not watching.done()
    reads, writes = await asyncio.gather(reads_of_b(http, going), writer.writes_of_b(http, going))
    await watching
    return reads, writes


async def main(requests: int, seconds: float, users: int) -> None:
    settings = bench_settings("erasureflood", api=ApiSettings(api_keys=keys(users)))
    await prepare(settings)
    try:
        for i in range(users):
            await seed(settings, "tenant-a", f"a{i}", f"a{i}", 200)
        await seed(settings, "tenant-b", "b", "bob", 20)
        projectors = worker(settings, "--projectors-only")  # separate processes, as deployed
        await projectors.__aenter__()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        api = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memory_agent.cli", "api", "--port", str(port),
            env=child_env(settings, {"MEMORY_API__API_KEYS": json.dumps(keys(users))}))
        base = f"http://127.0.0.1:{port}"
        writer = Writer(settings, 20)
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
                                         limits=httpx.Limits(max_connections=requests + 10)) as http:
                await b_meanwhile(http, writer, 2)  # warm up
                reads_alone, writes_alone = await b_meanwhile(http, writer, 2 * seconds)
                # B reads and writes during the flood and until every erasure it appended is
                # applied (at least as long again after it): the projectors' work.
                until = Until(settings, 2 * seconds)

                async def flooding() -> tuple[Counter, set[str]]:
                    codes, events = await flood(http, requests, seconds, users)
                    until.events = events
                    return codes, events

                (reads_during, writes_during), (codes, events) = await asyncio.gather(
                    b_until_applied(http, writer, until), flooding())
            applied = until.applied
            waited = time.monotonic() - until.start
            applying = await scalar(settings, "SELECT extract(epoch FROM max(applied_at) - min(applied_at)) FROM erasures")
            scrubbed = await scalar(settings, "SELECT count(*) FROM erasure_scrubs WHERE scrubbed_at IS NOT NULL")
        finally:
            api.terminate()
            await api.wait()
            await projectors.__aexit__(None, None, None)
        report(f"erasure flood: {requests} DELETE /v1/users/<a user of A> ({users} distinct) over {seconds:g} s,"
               " tenant B reading and writing", {
                   "B's context reads alone": summary(reads_alone),
                   "B's context reads during the flood (until every erasure is applied)": summary(reads_during),
                   "B's reads, flood / alone": ratio(reads_during, reads_alone),
                   "B's appends until projected alone": summary(writes_alone),
                   "B's appends until projected during the flood (until every erasure is applied)": summary(writes_during),
                   "B's appends, flood / alone": ratio(writes_during, writes_alone),
                   "answers to the flood": dict(sorted(codes.items())),
                   "distinct erasure events appended": len(events),
                   "erasures applied by the projector": applied,
                   "seconds from the first erasure applied to the last": round(float(applying or 0), 1),
                   "seconds from the flood's start until every erasure was applied": round(waited, 1),
                   "tables rewritten by the scrub": scrubbed,
               })
    finally:
        await drop(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--users", type=int, default=1, help="distinct users of tenant A erased in turn")
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.seconds, args.users))

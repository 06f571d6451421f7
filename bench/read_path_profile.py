"""Per-request CPU of the context endpoint's read path, in process: build_turn_context (and the
served-context payload) against a populated schema, timed with time.process_time (this
process's CPU: the API's Python and the query embedding) and wall clock, with the statements
sent counted; optionally a cProfile of the whole run.

    python bench/read_path_profile.py [--n 100000] [--reuse] [--keep] [--requests 200] [--profile] [--per-statement]

(from the repo root, PostgreSQL up.) The schema is bench/retrieval_bench.py's (`bench_retrieval`,
so `--reuse` shares one loaded by either script); `--random-vectors` fills the synthetic items
with seeded random unit vectors instead of the model's (the model needs ~23 min for 100k
here), which keeps the CPU of every statement and of the Python around it representative but
not the recall. PostgreSQL's own CPU is read from /proc/<backend pid>/stat of the
connection's server process (utime + stime, when the server runs on this machine: the
shared one does), summed over the measured requests. Numbers: docs/retrieval.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import retrieval_bench as rb  # noqa: E402
from bench.common import machine, percentile  # noqa: E402
from api.served import served_payload  # noqa: E402
from api.turn_context import build_turn_context  # noqa: E402
from core.settings import KafkaSettings, PostgresSettings, Settings, get_settings  # noqa: E402
from projections import queries  # noqa: E402
from retrieval.request import ContextRequest  # noqa: E402
from retrieval.service import warm_up  # noqa: E402


class Counting(psycopg.AsyncCursor):
    """Counts the statements sent (every execute of every cursor of the connection)."""

    statements = 0
    wall_ms: dict[str, float] = {}  # by the statement's first words: where the server time goes
    server_ms: dict[str, float] = {}  # the backend's CPU during the statement (clock ticks: a mean over many)
    backend: int | None = None
    per_statement = False  # --per-statement: two /proc reads per statement (in the API CPU column)

    async def execute(self, query, *args, **kwargs):  # type: ignore[override]
        Counting.statements += 1
        started = time.perf_counter()
        server = backend_cpu_ms(Counting.backend) if Counting.per_statement and Counting.backend else None
        try:
            return await super().execute(query, *args, **kwargs)
        finally:
            name = " ".join(str(query).split())[:70]
            Counting.wall_ms[name] = Counting.wall_ms.get(name, 0.0) + (time.perf_counter() - started) * 1000
            if server is not None:
                Counting.server_ms[name] = Counting.server_ms.get(name, 0.0) + backend_cpu_ms(Counting.backend) - server


def backend_cpu_ms(pid: int) -> float | None:
    """The server process's CPU (user + system) so far, in ms; None if it is not on this machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def run(settings: Settings, requests: int, profile: bool, conversations: int) -> dict:
    state = SimpleNamespace(settings=settings)
    await warm_up(state)
    rng = random.Random(2)
    cpu, wall, statements = [], [], []
    profiler = cProfile.Profile() if profile else None
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public",
            cursor_factory=Counting) as conn:
        await conn.execute("TRUNCATE surfaced_items")
        await conn.commit()
        backend = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
        await conn.rollback()
        Counting.backend = backend
        for i in range(requests + 20):
            query = rng.choice(rb.QUESTIONS).format(name=rng.choice(rb.NAMES),
                                                    **{k: rng.choice(v) for k, v in rb.SLOTS.items()})
            if rng.random() < 0.3:
                query = rng.choice(rb.L.QUERIES).text
            conversation_id = f"bench-{rng.randrange(conversations)}"
            Counting.statements = 0
            c0, w0 = time.process_time(), time.perf_counter()
            if profiler and i >= 20:
                profiler.enable()
            conversation = await queries.get_conversation(conn, rb.L.A, conversation_id)
            await conn.rollback()
            request = ContextRequest(conversation=conversation, user_id=conversation.user_id,
                                     subject_id=conversation.subject_id, query=query, before_seq=None,
                                     budget_tokens=500, now=datetime.now(UTC))
            out = await build_turn_context(conn, request, min_seq=None, app_state=state)
            served_payload(request, out)
            await conn.rollback()
            if profiler:
                profiler.disable()
            if i == 19:
                Counting.wall_ms.clear()
                Counting.server_ms.clear()
                server_start = backend_cpu_ms(backend)
            if i >= 20:  # the first ones warm the plans, caches and tokenizer
                cpu.append((time.process_time() - c0) * 1000)
                wall.append((time.perf_counter() - w0) * 1000)
                statements.append(Counting.statements)
    server_end = backend_cpu_ms(backend)
    server = None if server_end is None else round((server_end - server_start) / requests, 2)
    if profiler:
        stats = pstats.Stats(profiler)
        stats.sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(45)
    by_statement = {name: round(ms / requests, 2) for name, ms in
                    sorted(Counting.wall_ms.items(), key=lambda kv: -kv[1])[:12]}
    server_by_statement = {name: round(ms / requests, 2) for name, ms in
                           sorted(Counting.server_ms.items(), key=lambda kv: -kv[1])[:12]}
    return {"statement_wall_ms_per_request": by_statement, "statement_server_cpu_ms_per_request": server_by_statement, "requests": requests, "api_cpu_ms_mean": round(sum(cpu) / len(cpu), 2),
            "api_cpu_ms_p50": round(percentile(cpu, 50), 2),
            "postgres_cpu_ms_mean": server, "wall_ms_p50": round(percentile(wall, 50), 2),
            "wall_ms_mean": round(sum(wall) / len(wall), 2), "statements_per_request": round(
                sum(statements) / len(statements), 2), "load_average": [round(x, 2) for x in os.getloadavg()]}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--conversations", type=int, default=48)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--per-statement", action="store_true",
                        help="the server's CPU per statement too (its /proc reads add ~1 ms to the API CPU)")
    parser.add_argument("--random-vectors", action="store_true")
    parser.add_argument("--users", type=int, default=1000, help="as bench/retrieval_bench.py --users")
    args = parser.parse_args()
    base = get_settings()
    settings = Settings(generation=rb.GENERATION, postgres=PostgresSettings(dsn=base.postgres.dsn),
                        kafka=KafkaSettings(topic_prefix=rb.TOPIC_PREFIX), state_dir=base.state_dir,
                        embedding=base.embedding, retrieval=base.retrieval,
                        topics=base.topics.model_copy(update={"context_wait_ms": 0}))
    print(f"machine: {machine()}\ncommand: {' '.join(sys.argv)}", flush=True)
    results: dict = {"n": args.n, "random_vectors": args.random_vectors}
    if not args.reuse:
        results["load"] = await rb.load(settings, args.n, args.conversations, users=args.users,
                                        synthetic_vectors=args.random_vectors)
    Counting.per_statement = args.per_statement
    results["in_process"] = await run(settings, args.requests, args.profile, args.conversations)
    print(json.dumps(results, indent=2))
    if not args.keep:
        await rb.drop_schema(settings)


if __name__ == "__main__":
    asyncio.run(main())

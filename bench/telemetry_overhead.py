"""The read path's CPU per request with tracing off, on, and before tracing existed.

    git archive BASE | tar -x -C /tmp/before          # the code before tracing (e.g. BASE=main before the merge)
    python bench/telemetry_overhead.py [--before /tmp/before] [--requests 400] [--rounds 3] [--messages 30]

(from the repo root; Kafka and PostgreSQL from MEMORY_KAFKA__BOOTSTRAP_SERVERS /
MEMORY_POSTGRES__DSN.) One conversation is appended and projected once; then, per round and in
turn, a fresh process per variant builds the API app (in process, over httpx's ASGI transport:
the middleware stack, routing, auth, the context read with retrieval and packing, the
served-context record) and times `--requests` GET /context calls with a query after a warm-up:
time.process_time (the process's CPU, every thread: the exporter's too) and wall clock.
Variants: `off` (this code, MEMORY_TELEMETRY__ENABLED unset), `on` (enabled, exporting OTLP/HTTP
to a sink in this parent process, so the sink's CPU is not counted), `before` (the tree given by
--before, on sys.path first). The query is the same each time (the API's query-vector cache
answers it), so the CPU is the Python and the statements, not the embedding model.
Numbers: docs/observability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("BENCH_CODE_ROOT", ROOT))
sys.path.insert(0, str(CODE))

KEY, TENANT, USER, CONVERSATION = "bench-key", "bench", "u1", "c1"
QUERY = "what did we decide about the garden irrigation schedule"


def settings_for(generation: str, prefix: str):
    from core.settings import ApiSettings, KafkaSettings, PostgresSettings, Settings, get_settings

    base = get_settings()
    return Settings(environment="test", generation=generation, state_dir=Path(f"/tmp/memory-agent-bench/{generation}"),
                    kafka=KafkaSettings(bootstrap_servers=base.kafka.bootstrap_servers, topic_prefix=prefix,
                                        partitions=1),
                    postgres=PostgresSettings(dsn=base.postgres.dsn, pool_max_size=4),
                    api=ApiSettings(api_keys={KEY: {"tenant": TENANT, "act_as": "any_user"}}))


async def populate(settings, messages: int) -> None:
    """The conversation appended and projected (the projectors run until it is visible)."""
    import psycopg

    from bench.common import prepare
    from memory_agent.worker import run_projectors
    from runtime.client import MemoryClient

    await prepare(settings)
    async with MemoryClient(settings) as client:
        for seq in range(messages):
            await client.append_message(tenant_id=TENANT, conversation_id=CONVERSATION, user_id=USER, seq=seq,
                                        role="user" if seq % 2 == 0 else "assistant",
                                        content=f"message {seq}: the garden irrigation schedule, step {seq}")
    stop = asyncio.Event()
    projecting = asyncio.create_task(run_projectors(settings, stop))
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True,
                                                     options=f"-c search_path={settings.pg_schema},public") as conn:
        while True:
            row = await (await conn.execute("SELECT count(*) FROM messages WHERE conversation_id = %s",
                                            (CONVERSATION,))).fetchone()
            if row[0] >= messages:
                break
            await asyncio.sleep(0.2)
    await asyncio.sleep(3)  # the message index's embeddings too
    stop.set()
    await projecting


async def measure(generation: str, prefix: str, requests: int) -> dict:
    import httpx

    from api.app import create_app

    settings = settings_for(generation, prefix)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench",
                                     headers={"X-API-Key": KEY, "X-User-Id": USER}) as http:
            async def one() -> None:
                answer = await http.get(f"/v1/conversations/{CONVERSATION}/context", params={"query": QUERY})
                assert answer.status_code == 200, answer.text
            for _ in range(30):
                await one()
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(requests):
                await one()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    import api.app as code

    return {"cpu_us": cpu / requests * 1e6, "wall_us": wall / requests * 1e6, "code": str(Path(code.__file__).parents[1])}


def hook_cost_off(n: int = 200_000) -> dict:
    """What one hook costs when tracing is off: a `span` block and an awaited `traced` (ns each)."""
    from core import telemetry

    assert not telemetry.enabled()
    started = time.perf_counter_ns()
    for _ in range(n):
        with telemetry.span("x"):
            pass
    span_ns = (time.perf_counter_ns() - started) / n

    async def nothing() -> None:
        return None

    async def awaited() -> float:
        begun = time.perf_counter_ns()
        for _ in range(n):
            await telemetry.traced("x", nothing())
        plain = time.perf_counter_ns()
        for _ in range(n):
            await nothing()
        return ((plain - begun) - (time.perf_counter_ns() - plain)) / n
    return {"span_block_ns": round(span_ns, 1), "traced_await_extra_ns": round(asyncio.run(awaited()), 1)}


class Sink(BaseHTTPRequestHandler):
    spans_bytes = 0

    def do_POST(self) -> None:  # noqa: N802
        Sink.spans_bytes += len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, help="a tree of the code before tracing (git archive BASE)")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=30)
    parser.add_argument("--measure", nargs=2, metavar=("GENERATION", "PREFIX"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(asyncio.run(measure(*args.measure, args.requests))))
        return
    from bench.common import machine

    uid = uuid.uuid4().hex[:8]
    generation, prefix = f"b{uid}", f"bench-otel-{uid}"
    asyncio.run(populate(settings_for(generation, prefix), args.messages))
    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    variants = {"off": {}, "on": {"MEMORY_TELEMETRY__ENABLED": "true", "MEMORY_TELEMETRY__ENDPOINT":
                                  f"http://127.0.0.1:{sink.server_address[1]}/v1/traces"}}
    if args.before:
        variants["before"] = {"BENCH_CODE_ROOT": str(args.before.resolve())}
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, extra in variants.items():
            env = {**os.environ, "MEMORY_TELEMETRY__ENABLED": "false", **extra, "MEMORY_LOG_LEVEL": "WARNING"}
            out = subprocess.run([sys.executable, __file__, "--measure", generation, prefix, "--requests",
                                  str(args.requests)], env=env, capture_output=True, text=True, check=True)
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = min(r["cpu_us"] for r in results["off"])
    report = {name: {"cpu_us_per_request_min": round(min(r["cpu_us"] for r in runs), 1),
                     "cpu_us_per_request_all": [round(r["cpu_us"], 1) for r in runs],
                     "wall_us_per_request_min": round(min(r["wall_us"] for r in runs), 1),
                     "cpu_vs_off": round(min(r["cpu_us"] for r in runs) / base, 3), "code": runs[0]["code"]}
              for name, runs in results.items()}
    print(json.dumps({"machine": machine(), "load_at_end": os.getloadavg(), "requests": args.requests,
                      "hook_cost_off": hook_cost_off(),
                      "rounds": args.rounds, "otlp_bytes_received": Sink.spans_bytes, "variants": report}, indent=2))


if __name__ == "__main__":
    main()

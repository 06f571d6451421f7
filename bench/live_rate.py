"""All memory systems live, at rising message rates: which rate does one deployment keep up with?

    python -m bench.live_rate --models stub --rates 10,20,40,80 --step-seconds 60
    python -m bench.live_rate --models offline --rates 5,10,20,40 --workers 1

Starts `--workers` `memory-agent worker` processes with every system on (window, facts, topics,
the message index) on a fresh deployment, then sends messages paced at each rate in turn for
`--step-seconds` (round-robin over `--conversations`, user and assistant turns). For each step:

* the total consumer lag over every group of the generation at the step's end (faust agents,
  stages, projectors: summaries, facts and topics included), and how long it takes to drain
  to 0 once the step's sending stops;
* projection latency (message `occurred_at` -> `projected_at`), p50 / p95 / max;
* worker CPU per message sent in the step (utime + stime of the worker processes from /proc).

A step **keeps up** when every group is back at lag 0 within `--keep-up-seconds` (10) of the
step's last send (the backlog stayed bounded) and the p95 projection latency is under
`--max-latency-s` (10); the run stops after the first step that does
not (the next rate would only fall further behind) and reports the highest rate kept up. The
machine is usually shared: the load average is printed beside each step. `--models` as in
bench/system_bench.py (stub: stub embedder and the tests' fake OpenAI server; offline: defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

import psycopg

from bench.backbone_bench import produce
from bench.common import bench_settings, machine, prepare, report, scalar
from bench.system_bench import Lag, clean_up, cpu_seconds, start_workers, stop_workers
from runtime.client import MemoryClient
from tests.support.fake_openai import FakeOpenAI

WARM_UP_MESSAGES = 40


async def latency(settings, since_seq: dict, until_seq: dict) -> dict:
    """Projection latency of the step's messages (seq ranges per conversation), seconds."""
    pairs = [(c, since_seq.get(c, 0), until_seq[c]) for c in until_seq if until_seq[c] > since_seq.get(c, 0)]
    if not pairs:
        return {}
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        row = await (await conn.execute(
            "WITH step(conversation_id, lo, hi) AS (SELECT * FROM unnest(%s::text[], %s::int[], %s::int[]))"
            " SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d), percentile_cont(0.95) WITHIN GROUP (ORDER BY d),"
            " max(d), count(*) FROM (SELECT extract(epoch FROM m.projected_at - m.occurred_at) AS d"
            " FROM messages m JOIN step s ON s.conversation_id = m.conversation_id"
            " AND m.seq >= s.lo AND m.seq < s.hi WHERE m.tenant_id = 'bench') x",
            ([p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]))).fetchone()
    p50, p95, worst, count = row
    return {"p50_s": round(float(p50 or 0), 2), "p95_s": round(float(p95 or 0), 2), "max_s": round(float(worst or 0), 2),
            "projected": count}


async def drained(lag: Lag, limit: float) -> float | None:
    """Seconds until every group of the generation is at lag 0 again after a step's last send
    (None: not within `limit`)."""
    begin = time.monotonic()
    while time.monotonic() - begin <= limit:
        if (await lag.total())[0] == 0:
            return round(time.monotonic() - begin, 1)
        await asyncio.sleep(0.5)
    return None


async def wait_settled(settings, lag: Lag, expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await scalar(settings, "SELECT count(*) FROM messages") >= expected and (await lag.total())[0] == 0:
            return
        await asyncio.sleep(1.0)
    raise TimeoutError(f"warm-up not settled after {timeout} s")


async def run(args) -> dict:
    settings = bench_settings("live", partitions=args.partitions)
    await prepare(settings)
    salt = f" [{uuid.uuid4().hex[:8]}]"
    fake = FakeOpenAI().start() if args.models == "stub" else None
    env = {"MEMORY_SYSTEMS": '["window", "facts", "topics"]'}
    if fake is not None:
        env |= fake.env(llm=True) | {"MEMORY_EMBEDDING__PROVIDER": "stub"}
    started_at = time.time()
    processes = []
    steps = []
    try:
        processes = await start_workers(settings, args.workers, env)
        seqs: dict[str, int] = {}
        async with MemoryClient(settings) as client, Lag(settings) as lag:
            await produce(client, WARM_UP_MESSAGES, args.conversations, seq_base=seqs, salt=salt)
            await wait_settled(settings, lag, WARM_UP_MESSAGES, args.timeout)
            for rate in args.rates:
                count = int(rate * args.step_seconds)
                since = dict(seqs)
                lag_before = (await lag.total())[0]
                cpu_before = sum(cpu_seconds(p.pid) for p in processes)
                load_start = os.getloadavg()[0]
                sent_s = await produce(client, count, args.conversations, rate=rate, seq_base=seqs, salt=salt)
                behind = (await lag.total())[0]
                drain_s = await drained(lag, limit=args.keep_up_seconds * 4)
                cpu = sum(cpu_seconds(p.pid) for p in processes) - cpu_before
                if any(p.returncode is not None for p in processes):
                    raise RuntimeError(f"a worker exited: see {[str(p.log_path) for p in processes]}")
                step = {
                    "rate_per_s": rate, "sent": count, "send_seconds": round(sent_s, 1),
                    "lag_end_records": behind, "lag_growth_records": behind - lag_before,
                    "drain_seconds": drain_s,
                    "projection_latency": await latency(settings, since, seqs),
                    "worker_cpu_ms_per_message": round(1000 * cpu / count, 2),
                    "worker_cores_used": round(cpu / sent_s, 2),
                    "load_average": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
                }
                step["kept_up"] = (drain_s is not None and drain_s <= args.keep_up_seconds
                                   and step["projection_latency"].get("p95_s", 1e9) < args.max_latency_s)
                steps.append(step)
                print(step, flush=True)
                if not step["kept_up"]:
                    break
        kept = [s["rate_per_s"] for s in steps if s["kept_up"]]
        return {"models": args.models, "workers": args.workers, "conversations": args.conversations,
                "partitions": args.partitions, "highest_rate_kept_up_per_s": max(kept) if kept else 0,
                "steps": steps}
    finally:
        if processes:
            await stop_workers(processes)
        await clean_up(settings, fake, started_at)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="10,20,40,80", type=lambda s: [float(x) for x in s.split(",")])
    parser.add_argument("--step-seconds", type=float, default=60)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--models", choices=["offline", "stub"], default="stub")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--keep-up-seconds", type=float, default=10.0)
    parser.add_argument("--max-latency-s", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    print(machine(), flush=True)
    report("live rates, all systems", await run(args))


if __name__ == "__main__":
    asyncio.run(main())

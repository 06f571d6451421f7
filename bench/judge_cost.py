"""What a judgement of recorded turns costs (issue 26: "10,000 recorded turns in minutes").

    python -m bench.judge_cost [--conversations 10] [--turns 10000] [--systems window,facts]
                               [--cpu-share 1.0] [--out FILE]

Builds one deployment from the project's long-conversation generator (the worker with the
offline summarizer and extractor, as shipped), lets memory settle, then serves a context over
real HTTP (the API under uvicorn) at every user turn after the first tenth of each conversation,
as a chat service would, until `--turns` contexts are served or the conversations run out. The
`context.served` records are projected like any others. Then it judges the generation against
itself on every recorded turn (`api/judge.py`, in this process, paced to `--cpu-share` of one
core; 1.0: no pacing) and prints: turns, wall seconds, this process's CPU seconds, per turn, and
the time 10,000 turns take at that rate and at the CLI's default half core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import httpx

from bench import common, context_quality as CQ, longconv


async def serve(settings, conversations, port: int, limit: int) -> int:
    """A context at each user turn after the first tenth (the judged turns of a real service)."""
    served = 0
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": CQ.API_KEY},
                                 timeout=60) as http:
        for conv in conversations:
            for m in conv.messages:
                if served >= limit:
                    return served
                if m.role != "user" or m.seq < len(conv.messages) // 10:
                    continue
                params = {"before_seq": m.seq, "query": m.content, "budget_tokens": 500}
                response = await http.get(f"/v1/conversations/{conv.conversation_id}/context", params=params)
                response.raise_for_status()
                served += 1
    return served


async def recorded(settings, served: int, timeout: float = 300) -> int:
    deadline = time.monotonic() + timeout
    count = 0
    while time.monotonic() < deadline:
        count = await common.scalar(settings, f"SELECT count(*) FROM gen_{settings.generation}.served_contexts")
        if count >= served:
            break
        await asyncio.sleep(0.5)
    return count


async def judge_all(settings, cpu_share: float) -> dict:
    from api import judge as R
    from api.judging import embedder_of
    from runtime.judge import Options

    embedder = embedder_of(settings)
    cpu, wall = time.process_time(), time.monotonic()
    report = await R.judge(settings, settings.generation, settings.generation, settings, embedder,
                           Options(cpu_share=cpu_share))
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    await embedder.aclose()
    o = report["overall"]
    turns = max(o["turns"], 1)
    return {"turns": o["turns"], "errors": o["errors"], "verdict": o["verdict"], "wall_s": round(wall, 1),
            "paced_s": o["paced_seconds"], "cpu_s": round(cpu, 1), "wall_ms_per_turn": round(1000 * wall / turns, 1),
            "cpu_ms_per_turn": round(1000 * cpu / turns, 1),
            "minutes_for_10000": round((wall - o["paced_seconds"]) / turns * 10000 / 60, 1),
            "minutes_for_10000_at_half_core": round((wall - o["paced_seconds"]) / turns * 10000 / 60 * 2, 1)}


async def run(args) -> dict:
    conversations = longconv.generate(args.seed, args.conversations, sessions=(15, 30), turns=(14, 30))
    total = sum(len(c.messages) for c in conversations)
    print(f"{len(conversations)} conversations, {total} messages", flush=True)
    settings = common.bench_settings("judgecost")
    await common.prepare(settings)
    env = {"MEMORY_SYSTEMS": json.dumps(args.systems.split(","))}
    os.environ.update(env)  # the API too: an API expecting topics would wait for them on every context
    result = {"machine": common.machine(), "command": " ".join(sys.argv), "messages": total, "systems": args.systems}
    port = CQ._free_port()  # noqa: SLF001 - the bench's own helper
    api = None
    try:
        async with common.worker(settings, extra_env=env):
            await CQ.ingest(settings, conversations)
            async with CQ.Db(settings) as db:
                result["settle"] = await CQ.settle(db, settings, total, args.settle_timeout, 20.0)
            print(f"settled: {result['settle']}", flush=True)
            api = CQ.start_api(settings, port)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                await CQ.wait_healthy(http)
            started = time.monotonic()
            served = await serve(settings, conversations, port, args.turns)
            result["served"] = {"contexts": served, "seconds": round(time.monotonic() - started, 1)}
            result["served"]["recorded"] = await recorded(settings, served)
            print(f"served: {result['served']}", flush=True)
        result["judge"] = await judge_all(settings, args.cpu_share)
        print(f"judged: {result['judge']}", flush=True)
    finally:
        if api is not None:
            api.terminate()
            api.wait(30)
        await CQ.drop_everything(settings)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--turns", type=int, default=10000, help="contexts to serve and judge (at most)")
    parser.add_argument("--systems", default="window,facts")
    parser.add_argument("--cpu-share", type=float, default=1.0)
    parser.add_argument("--settle-timeout", type=float, default=1200.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    print(f"machine: {common.machine()}\ncommand: {' '.join(sys.argv)}", flush=True)
    result = asyncio.run(run(args))
    common.save_json(result, args.out, f"judge-cost-{int(time.time())}.json")


if __name__ == "__main__":
    main()

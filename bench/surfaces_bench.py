"""The doors of issue 13 timed on the real stack (seed 001: store and search under 500 ms).

    python -m bench.surfaces_bench [--memories 1000] [--searches 200] [--cli 10]

A fresh generation on the configured Kafka/PostgreSQL; the real API under uvicorn in this
process and a worker process (projectors) beside it. It:
1. stores `--memories` memories through `POST /v1/memories?wait=true` (one client): the
   time until each is searchable (embed + append + project + visible), the first 10 excluded;
2. runs `--searches` `GET /v1/search` queries (one client, each a new question) over them;
3. runs `memory-agent search` `--cli` times as a child process (wall time, process start included).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time

import httpx
import uvicorn

from api.app import create_app
from bench.common import bench_settings, drop, drop_topics, percentile, prepare, report, worker
from core.settings import ApiSettings

THINGS = ["router", "laptop", "backup job", "database", "printer", "deploy script", "VPN", "kettle", "calendar",
          "invoice run", "monitor", "test suite", "garden hose", "bike", "train ticket", "passport"]
FACTS = ["The {t} in the {p} broke on {d} and was fixed by {w}.", "{w} prefers the {t} in the {p} to be checked on {d}.",
         "We decided to replace the {t} in the {p} before {d}.", "The {t} of the {p} needs a new part from {w}."]
PLACES = ["office", "kitchen", "garage", "server room", "attic", "car", "studio", "basement"]
DAYS = ["Monday", "Tuesday", "the weekend", "March", "the holidays", "next sprint"]
WHO = ["Lena", "Krz", "the landlord", "Maria", "the IT desk", "Tom"]
QUESTIONS = ["What broke in the {p}?", "Who fixes the {t}?", "When do we replace the {t}?", "Anything about the {p}?",
             "WiFi problem", "What did we decide about the {t}?"]


def memory_text(rng: random.Random) -> str:
    return rng.choice(FACTS).format(t=rng.choice(THINGS), p=rng.choice(PLACES), d=rng.choice(DAYS), w=rng.choice(WHO))


async def run(args) -> dict:
    settings = bench_settings("surfaces", api=ApiSettings(api_keys={"k": {"tenant": "t", "act_as": "any_user"}}))
    await prepare(settings)
    rng = random.Random(7)
    port = 18000 + rng.randrange(1000)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False))
    serving = asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"
    headers = {"X-API-Key": "k", "X-User-Id": "nox"}
    try:
        async with worker(settings, "--projectors-only", extra_env={"MEMORY_WORKER__METRICS_PORT": "0"}):
            while not server.started:
                await asyncio.sleep(0.05)
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
                stored, merged = [], 0
                for index in range(args.memories):
                    started = time.perf_counter()
                    body = (await http.post("/v1/memories", params={"wait": "true", "wait_ms": 30000},
                                            json={"content": memory_text(rng), "importance": rng.randint(1, 5)})).json()
                    if not body["projected"]:
                        raise RuntimeError(f"memory {index} not projected within 30 s: {body}")
                    merged += body["outcome"] == "merged"
                    if index >= 10:
                        stored.append((time.perf_counter() - started) * 1000)
                searched, found = [], 0
                for index in range(args.searches):
                    question = rng.choice(QUESTIONS).format(t=rng.choice(THINGS), p=rng.choice(PLACES))
                    started = time.perf_counter()
                    response = await http.get("/v1/search", params={"q": f"{question} ({index})", "k": 10})
                    searched.append((time.perf_counter() - started) * 1000)
                    found += bool(response.json()["items"])
            cli = []
            env = {"MEMORY_CLIENT__URL": url, "MEMORY_CLIENT__API_KEY": "k", "MEMORY_CLIENT__USER": "nox"}
            import os

            for _ in range(args.cli):
                started = time.perf_counter()
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "memory_agent.cli", "search", "WiFi problem", "--json",
                    env=dict(os.environ, **env), stdout=asyncio.subprocess.DEVNULL)
                if await process.wait() != 0:
                    raise RuntimeError("memory-agent search failed")
                cli.append((time.perf_counter() - started) * 1000)
    finally:
        server.should_exit = True
        await serving
        await drop(settings)
        await drop_topics(settings.kafka.bootstrap_servers, settings.kafka.topic_prefix)

    def summary(values: list[float]) -> dict:
        return {"n": len(values), "p50_ms": round(percentile(values, 50), 1), "p90_ms": round(percentile(values, 90), 1),
                "p99_ms": round(percentile(values, 99), 1), "max_ms": round(max(values), 1)}

    return {"memories": args.memories, "merged_by_dedup": merged,
            "store_until_searchable": summary(stored), "search_http_1_client": summary(searched),
            "searches_with_results": found, "cli_search_wall": summary(cli)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--cli", type=int, default=10)
    args = parser.parse_args()
    report("surfaces: store, search, CLI", asyncio.run(run(args)))


if __name__ == "__main__":
    main()

"""The integration `settings` fixture's setup + teardown (migrate, ensure_topics, drop_everything)
per test, for one or more checkouts alternated in one run.

    MEMORY_TEST_KAFKA_BOOTSTRAP=... MEMORY_TEST_POSTGRES_DSN=... \
        .venv/bin/python bench/fixture_cost_bench.py --rounds 10 /path/to/before-checkout .

Each round runs every checkout once, in a child process with that checkout first on sys.path
(the fixture's code as that checkout has it), two fixture cycles per child; the child's imports
are outside the timing. Prints per checkout the median, min and max seconds per cycle and `uptime`.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace


async def _cycles(n: int) -> list[dict[str, float]]:
    from aiokafka.admin import AIOKafkaAdminClient

    from projections.migrate import migrate
    from runtime.kafka_topics import ensure_topics
    from tests.integration.conftest import drop_everything, make_settings

    stack = SimpleNamespace(
        kafka_bootstrap=os.environ["MEMORY_TEST_KAFKA_BOOTSTRAP"], postgres_dsn=os.environ["MEMORY_TEST_POSTGRES_DSN"]
    )
    shared = "admin" in inspect.signature(ensure_topics).parameters  # a checkout with one client per session
    admin = None
    if shared:
        admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
        await admin.start()
    out = []
    try:
        for _ in range(n):
            settings = make_settings(stack)
            t0 = time.perf_counter()
            await asyncio.to_thread(migrate, settings)
            t1 = time.perf_counter()
            await (ensure_topics(settings, admin=admin) if shared else ensure_topics(settings))
            t2 = time.perf_counter()
            await (drop_everything(settings, admin) if shared else drop_everything(settings))
            t3 = time.perf_counter()
            out.append({"migrate": t1 - t0, "topics": t2 - t1, "drop": t3 - t2, "total": t3 - t0})
    finally:
        if admin is not None:
            await admin.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_cycles(args.child))))
        return
    results: dict[str, list[dict[str, float]]] = {c: [] for c in args.checkouts}
    for _ in range(args.rounds):
        for checkout in args.checkouts:
            root = os.path.abspath(checkout)
            env = dict(os.environ, PYTHONPATH=root)
            child = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", "2", root],
                cwd=root, env=env, capture_output=True, text=True, check=True,
            )
            results[checkout] += json.loads(child.stdout.strip().splitlines()[-1])
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    for checkout, cycles in results.items():
        parts = {k: statistics.median(c[k] for c in cycles) for k in ("migrate", "topics", "drop")}
        totals = [c["total"] for c in cycles]
        print(
            f"{checkout}: n={len(totals)} total median {statistics.median(totals):.3f} s"
            f" (min {min(totals):.3f}, max {max(totals):.3f});"
            + "".join(f" {k} {v:.3f}" for k, v in parts.items())
        )


if __name__ == "__main__":
    main()

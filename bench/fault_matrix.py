"""Fault-matrix figures: runs tests/integration/test_fault_matrix.py N times and tabulates them.

    python -m bench.fault_matrix --runs 3
    MEMORY_KAFKA__SESSION_TIMEOUT_S=60 python -m bench.fault_matrix --runs 1   # faust's old session

The test starts its own Kafka and PostgreSQL (free ports, temporary state dir) and prints
what it measured (restart -> projecting again, outage durations, retried sends ...); this
script collects those lines into the markdown table of docs/faults.md. Set
MEMORY_TEST_KAFKA_LIBS to an existing `.state/kafka/libs` to skip Maven.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURE = re.compile(r"^  (?P<name>.+): (?P<value>[0-9.]+)$")


def one_run() -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/integration/test_fault_matrix.py", "-q", "-s", "-p", "no:warnings"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-5000:])
        raise SystemExit(f"the fault-matrix test failed (exit {done.returncode})")
    return {m["name"]: m["value"] for line in done.stdout.splitlines() if (m := FIGURE.match(line))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for index in range(args.runs):
        runs.append(one_run())
        print(f"run {index + 1}/{args.runs} done", file=sys.stderr)
    names = list(runs[0])
    print("| figure | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |")
    print("|---|" + "---|" * len(runs))
    for name in names:
        print(f"| {name} | " + " | ".join(run.get(name, "–") for run in runs) + " |")


if __name__ == "__main__":
    main()

"""How long `memory-agent --help` takes, beside a bare `python -c pass` measured in the same run.

    .venv/bin/python bench/cli_startup_bench.py [--runs 15] [--ref main]

Prints the median and best wall time of each command, their ratio, and the load average.
With --ref, also times `--help` of another git ref (checked out in a temporary worktree, run
with this venv's interpreter) so a before/after comparison shares one machine and one load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HELP = [sys.executable, "-c", "import sys; sys.argv = ['memory-agent', '--help']; from memory_agent.cli import main; main()"]


def timed(command: list[str], cwd: Path, runs: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    times = []
    for _ in range(runs):
        begin = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - begin)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--ref", help="Also time --help of this git ref (e.g. main before the change).")
    args = parser.parse_args()
    commands = {"python -c pass": ([sys.executable, "-c", "pass"], REPO), "memory-agent --help": (HELP, REPO)}
    worktree = None
    if args.ref:
        worktree = Path(tempfile.mkdtemp(prefix="cli-bench-")) / "ref"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.ref], check=True,
                       capture_output=True)
        commands[f"memory-agent --help at {args.ref}"] = (HELP, worktree)
    results = {}
    try:
        for _ in range(2):  # warm the file cache once
            for command, cwd in commands.values():
                timed(command, cwd, 1)
        for name, (command, cwd) in commands.items():
            times = timed(command, cwd, args.runs)
            results[name] = {"median_s": round(statistics.median(times), 3), "best_s": round(min(times), 3)}
    finally:
        if worktree is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)
            shutil.rmtree(worktree.parent, ignore_errors=True)
    bare = results["python -c pass"]["median_s"]
    for row in results.values():
        row["x_bare_python"] = round(row["median_s"] / bare, 2)
    print(json.dumps({"runs": args.runs, "load_average": os.getloadavg(), "cpus": os.cpu_count(),
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()

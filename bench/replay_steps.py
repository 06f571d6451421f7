"""Where a batch replay's time went, from its worker log (`BENCH_WORKER_LOG_LEVEL=INFO`):

    python -m bench.replay_steps /tmp/memory-agent-bench/<id>/logs/replay-warm1.log [...]

Per log: the steps of every partition summed over the partitions (seconds; the batch processes
run side by side, so the sums exceed the wall time), the topic step's parts, and the timeline:
worker start (first line) -> batch (the first partition read) -> last partition handed over ->
the agents' worker started -> its last line. Pure: reads the log's `batch replay of ...: partition
N: ...` lines (memory_agent/batch_replay `_logged`), no project imports.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from datetime import datetime

_PARTITION = re.compile(r"^(\S+ \S+) INFO memory_agent\.batch_replay: batch replay of \S+: partition (\d+): (\d+) events.*"
                        r"chunks (\{.*?\}), topics (\{.*?\}) in ([\d.]+)s (\{.*\})$")
_STAMP = re.compile(r"^\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


def _time(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")


def steps(lines: list[str]) -> dict:
    phases, facts, topics = Counter(), Counter(), Counter()
    partitions, events, first, last, handed, worker, batch = 0, 0, None, None, None, None, None
    for line in lines:
        stamp = _STAMP.match(line)
        if stamp:
            at = _time(stamp.group(1))
            first = first or at
            last = at
        if batch is None and "Updating subscribed topics" in line and "conversation-events" in line:
            batch = last
        if worker is None and "[^Worker]: Starting" in line:
            worker = last
        found = _PARTITION.match(line.rstrip())
        if found:
            partitions += 1
            events += int(found.group(3))
            handed = _time(found.group(1))
            phases.update(ast.literal_eval(found.group(7)))
            facts.update({k: v for k, v in ast.literal_eval(found.group(4)).items() if isinstance(v, float)})
            topics.update({k: v for k, v in ast.literal_eval(found.group(5)).items() if isinstance(v, float)})

    def since(a, b):
        return round((b - a).total_seconds(), 1) if a is not None and b is not None else None

    return {
        "partitions": partitions, "events": events,
        "timeline_s": {"worker start -> batch": since(first, batch), "batch -> last hand-over": since(batch, handed),
                       "last hand-over -> agents' worker": since(handed, worker),
                       "agents' worker -> last line": since(worker, last)},
        "steps_summed_s": {k: round(v, 1) for k, v in phases.most_common()},
        "facts_summed_s": {k: round(v, 1) for k, v in facts.most_common()},
        "topics_summed_s": {k: round(v, 1) for k, v in topics.most_common() if k != "publish"},
    }


def main() -> None:
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8", errors="replace") as f:
            print(path, steps(f.readlines()))


if __name__ == "__main__":
    main()

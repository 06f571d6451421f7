"""Replay benchmark: rebuild a generation from N logged messages, cold LLM cache then warm.

    python -m bench.replay_bench --messages 100000 --conversations 1000 --llm-latency 0.3 [--mode stream]
        [--systems window,facts[,topics]] [--warm-runs N] [--alternate DIR]

Writes N messages to a fresh deployment's log, then runs `memory-agent replay start`
twice with the same settings: the first replay pays for every summary at the fixed LLM
latency (cold cache), the second finds them all in the cache (warm). Reported: events/s
until the generation has caught up with the log and settled its summaries, and the cache
hits/calls. `--systems` picks the generation's memory systems (MEMORY_SYSTEMS; default the
window system only); with `facts` the fake server also answers the chunk extraction and the
embeddings (over HTTP, through the LLM and embedding caches), and a replay counts as done
once every due chunk is recorded too; with `topics` (the fake answers the topic summaries and
the embeddings too) once every message is placed in a topic with no compaction in flight.

`--warm-runs N` replays warm N times (generations warm1..warmN); with `--alternate DIR` (another
checkout of the code, e.g. `git archive main | tar -x -C DIR`) the odd warm runs start
`memory-agent replay start` (and so its worker and batch processes) from DIR, the even ones
from this checkout, so two versions of the code are compared on the same log, caches and
machine load. Each run reports the load average at its start and its worker log (the per-partition
steps with `BENCH_WORKER_LOG_LEVEL=INFO`), and `cpu_s`: the CPU seconds over the run of the worker's
process group (its batch processes included, until caught up and settled), of `replay start`, and of
PostgreSQL (postmaster, reaped and live backends) and Kafka when they run on this machine (Kafka's pid
from MEMORY_STATE_DIR, as `python -m infra.cli up` writes it): the stack should be private, or
the figures include other clients' work.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from pathlib import Path

import orjson
import psycopg
from aiokafka.errors import GroupCoordinatorNotAvailableError

from bench.common import bench_settings, child_env, drop, prepare, report
from bench.backbone_bench import produce
from memory_agent import replay as replays
from runtime.client import MemoryClient
from projections import generations as gens
from tests.support.fake_openai import FakeOpenAI

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu(pid: int, children: bool = True) -> float:
    """CPU seconds of one process (user + system), and of its children it waited for."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / _TICK


def _pids(match) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and match(int(entry), fields):
                found.append(int(entry))
    return found


def stack_cpu(settings) -> dict[str, float]:
    """CPU seconds so far of PostgreSQL (the postmaster, the backends it reaped, the live ones)
    and Kafka (the broker's process), found from the database and MEMORY_STATE_DIR's pid file."""
    cpu = {}
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        data = conn.execute("SHOW data_directory").fetchone()[0]
    try:
        postmaster = int(Path(data, "postmaster.pid").read_text().split()[0])
        cpu["postgres"] = _cpu(postmaster) + sum(
            _cpu(pid, children=False) for pid in _pids(lambda pid, f: int(f[1]) == postmaster))
    except OSError:  # not on this machine's /proc (a container)
        pass
    state = os.environ.get("MEMORY_STATE_DIR")
    kafka = Path(state, "kafka", "kafka.pid") if state else None
    if kafka is not None and kafka.exists():
        cpu["kafka"] = _cpu(int(kafka.read_text().split()[0]))
    return cpu


def group_cpu(leader: int) -> float:
    """CPU seconds of a process group (the detached worker, its batch processes, what they reaped)."""
    return sum(_cpu(pid) for pid in _pids(lambda pid, f: int(f[2]) == leader))


async def replay_once(settings, name: str, env: dict, mode: str, chunks: int, summaries: bool,
                      placed: int = 0, code: Path | None = None) -> dict:
    """One replay into generation `name`, started from the checkout `code` (default: this one)."""
    load = os.getloadavg()[0]
    stack_before = stack_cpu(settings)
    start_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    clock = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", "replay", "start", "--generation", name, "--detach", "--mode", mode,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=code,
    )
    out, _ = await process.communicate()
    if process.returncode:
        raise RuntimeError(out.decode())
    start_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    while True:
        try:
            p = await replays.progress(settings, name)
            if p.caught_up and p.total and await _settled(settings, name, chunks, summaries, placed):
                break
        except psycopg.OperationalError as exc:  # shared database: no free connection this moment
            if "too many clients" not in str(exc):
                raise
        except GroupCoordinatorNotAvailableError:  # a fresh Kafka: its offsets topic not ready yet
            pass
        await asyncio.sleep(0.25)
    elapsed = time.perf_counter() - clock
    worker = replays.pid_file(settings, name)
    cpu = {"worker_and_batch": round(group_cpu(int(worker.read_text())), 2) if worker.exists() else None,
           "replay_start": round(start_after.ru_utime + start_after.ru_stime
                                 - start_before.ru_utime - start_before.ru_stime, 2)}
    cpu |= {k: round(v - stack_before.get(k, 0.0), 2) for k, v in stack_cpu(settings).items()}
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        usage = gens.cache_usage(conn, settings.kafka.topic_prefix, name)
        summaries = conn.execute(f"SELECT count(*) FROM gen_{name}.memory").fetchone()[0]
        recorded = conn.execute(f"SELECT count(*) FROM gen_{name}.conversation_chunks").fetchone()[0] \
            if chunks else 0
        topics = conn.execute(f"SELECT count(*), coalesce(sum(compactions), 0) FROM gen_{name}.topics").fetchone() \
            if placed else (0, 0)
    replays.stop_worker(settings, name)
    return {
        "code": str(code or "this checkout"), "load_at_start": round(load, 2),
        "log": str(settings.state_dir / "logs" / f"replay-{name}.log"),
        "events": p.total, "seconds": round(elapsed, 1), "events_per_s": round(p.total / elapsed),
        "summaries": summaries, "chunks": recorded, "topics": topics[0], "topic_compactions": topics[1],
        "llm_cache": usage,
        "cpu_s": cpu,  # by process, over the run (the worker's until caught up and settled)
    }


async def _settled(settings, name: str, chunks: int, summaries: bool, placed: int = 0) -> bool:
    """No summary processing (window), every due chunk recorded (facts), every message placed
    in a topic and no compaction in flight (topics)."""
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn) as conn:
        row = await (await conn.execute(
            f"SELECT count(*) FILTER (WHERE status = 'processing'), count(*) FROM gen_{name}.memory"
        )).fetchone()
        if chunks:
            recorded = (await (await conn.execute(f"SELECT count(*) FROM gen_{name}.conversation_chunks")).fetchone())[0]
            if recorded < chunks:
                return False
        if placed:
            done = (await (await conn.execute(
                f"SELECT (SELECT count(*) FROM gen_{name}.topic_assignments)"
                f" + (SELECT count(*) FROM gen_{name}.topic_unassigned),"
                f" (SELECT count(*) FROM gen_{name}.topics WHERE compaction_status = 'requested')")).fetchone())
            if done[0] < placed or done[1]:
                return False
    return row[0] == 0 and (row[1] > 0 or not summaries)


def due_chunks(messages: int, conversations: int, threshold: int = 30, batch: int = 20) -> int:
    """Chunks the facts system records for `messages` round-robin over `conversations`: per
    conversation, `batch` at a time while more than `threshold` are unsummarized."""
    total = 0
    for c in range(conversations):
        n = messages // conversations + (c < messages % conversations)
        total += (n - threshold - 1) // batch + 1 if n > threshold else 0
    return total


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--llm-latency", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--mode", choices=("batch", "stream"), default="batch", help="replay start --mode")
    parser.add_argument("--systems", default="window", help="comma-separated: window, facts, topics")
    parser.add_argument("--warm-runs", type=int, default=1, help="warm replays after the cold one")
    parser.add_argument("--alternate", type=Path, default=None,
                        help="another checkout: the odd warm runs start from it, the even ones from this one")
    args = parser.parse_args()
    names = ["cold", *(["warm"] if args.warm_runs == 1 else [f"warm{n}" for n in range(1, args.warm_runs + 1)])]
    systems = args.systems.split(",")
    chunks = due_chunks(args.messages, args.conversations) if "facts" in systems else 0
    settings = bench_settings("replay")
    await prepare(settings)
    try:
        async with MemoryClient(settings, linger_ms=20) as client:
            # Text of its own: the first replay must find the shared LLM cache cold.
            await produce(client, args.messages, args.conversations, seq_base={}, salt=f" ({settings.kafka.topic_prefix})")
        with FakeOpenAI(latency_s=args.llm_latency) as fake:
            env = child_env(settings, fake.env(embeddings="facts" in systems or "topics" in systems) | {
                "MEMORY_SYSTEMS": orjson.dumps(systems).decode(), "MEMORY_LLM__CONCURRENCY": str(args.concurrency)})
            placed = args.messages if "topics" in systems else 0  # every message is a user or assistant one
            cold = await replay_once(settings, "cold", env, args.mode, chunks, "window" in systems, placed)
            warm = []
            for n, name in enumerate(names[1:], start=1):
                calls_before, embeds_before = len(fake.chat_requests), len(fake.embedding_requests)
                code = args.alternate.resolve() if args.alternate is not None and n % 2 else None
                run = await replay_once(settings, name, env, args.mode, chunks, "window" in systems, placed, code)
                run["llm_requests_seen_by_server"] = len(fake.chat_requests) - calls_before
                run["embedding_requests_seen_by_server"] = len(fake.embedding_requests) - embeds_before
                warm.append(run)
        report("replay benchmark", {
            "mode": args.mode, "systems": systems, "messages": args.messages, "conversations": args.conversations,
            "llm_latency_s": args.llm_latency,
            "llm_concurrency": args.concurrency, "cold_cache": cold, "warm_cache": warm[0] if len(warm) == 1 else warm,
        })
    finally:
        for name in names:
            replays.stop_worker(settings, name)
            await replays.drop_generation_topics(settings, name)
        with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
            for name in names:
                conn.execute(f"DROP SCHEMA IF EXISTS gen_{name} CASCADE")
                conn.execute("DELETE FROM public.memory_generations WHERE topic_prefix = %s AND name = %s",
                             (settings.kafka.topic_prefix, name))
        await drop(settings)


if __name__ == "__main__":
    asyncio.run(main())

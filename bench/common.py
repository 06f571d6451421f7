"""Shared helpers of the benchmark scripts: isolated settings, the worker process, statistics."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg

from core.settings import KafkaSettings, PostgresSettings, Settings, get_settings
from projections.migrate import migrate
from runtime.kafka_topics import ensure_topics


def bench_settings(name: str, *, partitions: int = 8, **overrides) -> Settings:
    """Settings on the configured Kafka/PostgreSQL with a unique topic prefix and generation."""
    base = get_settings()
    uid = uuid.uuid4().hex[:8]
    return Settings(
        environment="test",
        generation=f"b{uid}",
        state_dir=Path(f"/tmp/memory-agent-bench/{uid}"),
        kafka=KafkaSettings(
            bootstrap_servers=base.kafka.bootstrap_servers, topic_prefix=f"bench-{name}-{uid}", partitions=partitions
        ),
        postgres=PostgresSettings(dsn=base.postgres.dsn, pool_max_size=10),
        **overrides,
    )


async def prepare(settings: Settings) -> None:
    await asyncio.to_thread(migrate, settings)
    await ensure_topics(settings)


def child_env(settings: Settings, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        MEMORY_ENVIRONMENT=settings.environment,
        MEMORY_GENERATION=settings.generation,
        MEMORY_STATE_DIR=str(settings.state_dir),
        MEMORY_KAFKA__BOOTSTRAP_SERVERS=settings.kafka.bootstrap_servers,
        MEMORY_KAFKA__TOPIC_PREFIX=settings.kafka.topic_prefix,
        MEMORY_KAFKA__PARTITIONS=str(settings.kafka.partitions),
        MEMORY_POSTGRES__DSN=settings.postgres.dsn,
        MEMORY_LOG_LEVEL=os.environ.get("BENCH_WORKER_LOG_LEVEL", "WARNING"),
    )
    env.update(extra or {})
    return env


@asynccontextmanager
async def worker(settings: Settings, *args: str, extra_env: dict[str, str] | None = None, processes: int = 1):
    """`memory-agent worker` as separate processes, as in production: `processes` of them
    share the generation's consumer groups (each gets its share of the partitions)."""
    started = []
    try:
        for index in range(processes):
            log_path = Path(f"/tmp/memory-agent-bench/{settings.generation}-worker{index or ''}.log")
            log_path.parent.mkdir(parents=True, exist_ok=True)
            env = child_env(settings, extra_env)
            if index:
                env["MEMORY_STATE_DIR"] = f"{settings.state_dir}-{index}"
            with log_path.open("wb") as log:
                started.append(await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "memory_agent.cli", "worker", *args,
                    env=env, stdout=log, stderr=asyncio.subprocess.STDOUT,
                ))
        yield started[0]
    finally:
        for process in started:
            if process.returncode is None:
                process.terminate()
        for process in started:
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()


async def scalar(settings: Settings, sql: str, params=()):
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        row = await (await conn.execute(sql, params)).fetchone()
        return row[0] if row else None


async def drop(settings: Settings) -> None:
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{settings.pg_schema}" CASCADE')


async def drop_topics(bootstrap_servers: str, topic_prefix: str) -> None:
    """Delete a run's Kafka topics (every topic named `{topic_prefix}.*`)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        ours = [t for t in await admin.list_topics() if t.startswith(topic_prefix + ".")]
        if ours:
            await admin.delete_topics(ours)
    finally:
        await admin.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.platform()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"load average {load[0]:.2f} at start"
    )


def report(title: str, results: dict) -> None:
    print(f"\n## {title}\n")
    print(f"machine: {machine()}")
    print(f"command: {' '.join(sys.argv)}\n")
    print(json.dumps(results, indent=2))


def save_json(result: dict, out: Path | None, default_name: str) -> Path:
    """`result` as indented JSON in `out`, else /tmp/memory-agent-bench/<default_name>; prints where."""
    out = out or Path("/tmp/memory-agent-bench") / default_name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"JSON: {out}")
    return out


class Clock:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def _stat(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # fields from the state on


def process_cpu_ms(pid: int) -> float:
    """A process's CPU so far (user + system, every thread: the query embedding's too), in ms."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def server_cpu_ms(postmaster: int) -> float:
    """The PostgreSQL server's CPU so far, in ms: the postmaster's, its ended children's (added
    to it when reaped) and its live children's (the backends, autovacuum, the writers). Only
    meaningful on a server that runs nothing else (a private stack)."""
    fields = _stat(postmaster)
    ticks = sum(int(f) for f in fields[11:15])
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                child = _stat(entry.name)
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if child[1] == str(postmaster):
                ticks += int(child[11]) + int(child[12])
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


def machine_cpu_ms() -> float:
    """Every core's busy time so far (all processes of the machine: /proc/stat's first line, idle
    and iowait left out), in ms."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) * 1000 / os.sysconf("SC_CLK_TCK")


def schedstat_ms(pid: int, thread: int | None = None) -> tuple[float, float]:
    """(ms on a core, ms runnable but waiting for a core) so far, from /proc/.../schedstat: of one
    thread of the process, or summed over its live threads. (0, 0) once it is gone."""
    tids = [thread] if thread is not None else [t.name for t in os.scandir(f"/proc/{pid}/task")] \
        if os.path.isdir(f"/proc/{pid}/task") else []
    running = waiting = 0
    for tid in tids:
        try:
            on_cpu, queued, _ = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        running, waiting = running + int(on_cpu), waiting + int(queued)
    return running / 1e6, waiting / 1e6


def listener_pid(port: int) -> int | None:
    """The process listening on a local TCP port (e.g. a private stack's Kafka broker: its JVM), if
    this user can see it; None otherwise."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                if os.readlink(fd.path) in inodes:
                    return int(entry.name)
        except (FileNotFoundError, PermissionError, ProcessLookupError, NotADirectoryError):
            continue
    return None


async def postmaster_pid(settings: Settings) -> int | None:
    """The server's postmaster, if it runs on this machine (its CPU is then measurable)."""
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
        backend = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
        try:  # while the backend lives (once the connection closes it may be gone)
            return int(_stat(backend)[1])
        except (FileNotFoundError, IndexError, ValueError):
            return None

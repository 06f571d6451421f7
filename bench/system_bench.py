"""All memory systems at once: a backlog through window + facts + topics + the message index.

    python -m bench.system_bench --messages 20000 --conversations 200 --models stub
    python -m bench.system_bench --messages 20000 --conversations 200 --models offline
    python -m bench.system_bench --messages 100000 --conversations 1000 --models stub --workers 2

Writes N messages (text salted per run, so the shared LLM and embedding caches start cold) to a
fresh deployment's log, then starts `--workers` `memory-agent worker` processes with every system
on and polls until everything settled: every message projected and indexed, every consumer group
of the generation at lag 0 for three polls in a row. Reported:

* sustained messages/s from the first projected row to the settled state, the highest total
  consumer lag seen (records, all groups);
* worker CPU (utime + stime from /proc, every thread) per message over that interval;
* the workers' idle CPU per second (measured for `--idle-seconds` after settling: consumers
  polling and heartbeating with nothing to do), and the per-message CPU without that fixed cost
  over the interval (what a message costs a busy worker; on a shared machine the run is slow, so
  the idle part weighs heavily on the first figure);
* its split, from the line each worker logs at exit (`core.metrics.cpu_split`): process
  CPU while an embedding call / an OpenAI-client call was in flight (time.process_time around the
  calls, overlaps counted once: an upper bound, the event loop keeps working during a call), the
  rest is "everything else" (Kafka, faust, decoding, folds, PostgreSQL client). PostgreSQL's and
  Kafka's own CPU are not counted here (below);
* every process the run loads (`cpu_by_process`, over the same interval): the workers, this
  script (the stub LLM server runs in it), the Kafka broker (the JVM listening on the bootstrap
  port), the PostgreSQL server (postmaster and backends) and the whole machine (/proc/stat, other
  users' processes too), in CPU-ms a message and in cores, and the same in cores while idle
  (`idle_cores_by_process`); Kafka's and PostgreSQL's figures are theirs alone only on a private
  stack. With them `scheduler_share` (/proc/.../schedstat): the workers' event-loop threads on a
  core, runnable but waiting for a core, and asleep (waiting on the network or for records), as
  shares of the wall time. A loop that mostly waits for a core on a machine whose cores are busy
  is bounded by the machine's CPU, not by a wait of its own;
* per message: the PostgreSQL transactions the projectors committed
  (`memory_projector_transactions_total`), every transaction of the database over the workers'
  life (`pg_stat_database`; meaningful only on a PostgreSQL the run has to itself, e.g. a private
  stack), the embedder's model calls (embedding-queue batches) and texts, and the records written
  to each topic of the run (memory events, the processor's changelog, ...), read from the end
  offsets before the clean-up. These counts do not depend on the machine's load (batch sizes
  a little: a lagging consumer fetches more per batch).

`--models offline`: the local ONNX embedder and the offline (extractive) summarizer, as a default
install. `--models stub`: `MEMORY_EMBEDDING__PROVIDER=stub` (deterministic vectors, no model) and
the fake OpenAI server of the tests (answers at once, runs in this process) as the LLM, so the
plumbing alone shows. The machine is shared: the load average is printed beside each number.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
import uuid
from pathlib import Path

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from bench.backbone_bench import produce
from bench.burst_workload import WORKLOADS, burst, produce_burst
from bench.common import (bench_settings, child_env, drop, drop_topics, listener_pid, machine_cpu_ms,
                          postmaster_pid, prepare, report, scalar, schedstat_ms, server_cpu_ms)
from runtime.client import MemoryClient
from tests.support.fake_openai import FakeOpenAI

SPLIT_LINE = re.compile(r"worker cpu split at exit: (\{.*\})")
TICK = os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> tuple[float, float]:
    """(resident now, peak resident) of a process in MB, from /proc/PID/status (0 once it is gone)."""
    try:
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except FileNotFoundError:
        return 0.0, 0.0
    return tuple(int(status.get(k, "0 kB").split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


class Lag:
    """Total records behind the log end over every consumer group of the run's topic prefix (and,
    from the last poll, per group: `by_group`, the prefix left out of the names)."""

    def __init__(self, settings) -> None:
        self.prefix = settings.kafka.topic_prefix
        self.by_group: dict[str, int] = {}
        self.admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
        self.consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers)

    async def __aenter__(self) -> "Lag":
        await self.admin.start()
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.consumer.stop()
        await self.admin.close()

    async def total(self) -> tuple[int, int]:
        """(records behind, groups seen)."""
        groups = [g[0] for g in await self.admin.list_consumer_groups() if self.prefix in g[0]]
        self.by_group = {}
        for group in groups:
            offsets = {tp: m.offset for tp, m in (await self.admin.list_consumer_group_offsets(group)).items()
                       if m.offset >= 0}
            if offsets:
                ends = await self.consumer.end_offsets(list(offsets))
                name = group.replace(self.prefix, "").strip(".-") or group
                self.by_group[name] = sum(max(0, ends[tp] - offset) for tp, offset in offsets.items())
        return sum(self.by_group.values()), len(groups)


class Processes:
    """CPU so far (ms, user + system) of every process a run loads: the workers, this script (the
    stub LLM server runs in it, with the polls), the Kafka broker (the JVM listening on the
    bootstrap port, if local), the PostgreSQL server (postmaster and backends, if local) and the
    whole machine (/proc/stat: every core, every process, other users' too). Meaningful for Kafka
    and PostgreSQL only on a private stack (nobody else's traffic)."""

    def __init__(self, settings, workers: list) -> None:
        self.workers = workers
        host, _, port = settings.kafka.bootstrap_servers.split(",")[0].rpartition(":")
        self.kafka = listener_pid(int(port)) if host in ("127.0.0.1", "localhost") and port.isdigit() else None
        self.postmaster = None

    async def find_postgres(self, settings) -> None:
        self.postmaster = await postmaster_pid(settings)

    def snapshot(self) -> dict[str, float]:
        shot = {"workers": 1000 * sum(cpu_seconds(p.pid) for p in self.workers),
                "bench (stub LLM, polls)": 1000 * cpu_seconds(os.getpid())}
        if self.kafka is not None:
            shot["kafka"] = 1000 * cpu_seconds(self.kafka)
        if self.postmaster is not None:
            try:
                shot["postgres"] = server_cpu_ms(self.postmaster)
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
        shot["machine"] = machine_cpu_ms()
        return shot

    def waits(self) -> dict[str, float]:
        """Scheduler times so far (ms): the workers' event-loop threads (their main threads) on a
        core and runnable but waiting for one; every thread of the workers and of Kafka waiting
        for a core."""
        loop = [schedstat_ms(p.pid, p.pid) for p in self.workers]
        return {"worker loop on a core": sum(r for r, _ in loop),
                "worker loop waiting for a core": sum(w for _, w in loop),
                "worker threads waiting for a core": sum(schedstat_ms(p.pid)[1] for p in self.workers),
                **({"kafka threads waiting for a core": schedstat_ms(self.kafka)[1]} if self.kafka else {})}

    def loop_share(self, start: dict, end: dict, seconds: float) -> dict:
        """Each scheduler time over the interval as a share of its wall time (for the worker loop:
        what is left of 1 is the loop asleep, waiting on the network or for work)."""
        shares = {name: round((end[name] - start[name]) / 1000 / seconds, 2) for name in start}
        awake = shares["worker loop on a core"] + shares["worker loop waiting for a core"]
        shares["worker loop asleep"] = round(len(self.workers) - awake, 2)
        return shares

    @staticmethod
    def split(start: dict, end: dict, messages: int, seconds: float) -> dict:
        """Per message (ms) and in cores over `seconds`, each process and the rest of the machine."""
        used = {name: end[name] - start[name] for name in start if name in end}
        used["rest of the machine"] = used["machine"] - sum(v for k, v in used.items() if k != "machine")
        return {name: {"cpu_ms_per_message": round(ms / messages, 2), "cores": round(ms / 1000 / seconds, 2)}
                for name, ms in used.items()}


async def records_by_topic(settings) -> dict[str, int]:
    """Records written to each topic of the run (end offsets summed over partitions), the prefix
    left out of the names: the memory events and changelog writes a message caused."""
    prefix = settings.kafka.topic_prefix
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    await consumer.start()
    try:
        names = sorted(t for t in await admin.list_topics() if t.startswith(prefix))
        tps = [TopicPartition(d["topic"], p["partition"]) for d in await admin.describe_topics(names)
               for p in d["partitions"]] if names else []
        ends = await consumer.end_offsets(tps) if tps else {}
    finally:
        await consumer.stop()
        await admin.close()
    totals: dict[str, int] = {}
    for tp, end in ends.items():
        name = tp.topic[len(prefix):].lstrip(".-")
        totals[name] = totals.get(name, 0) + end
    return totals


_XACTS = ("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")


async def postgres_transactions(settings) -> int:
    """Transactions the database has counted so far, every client's (pg_stat_database): the run's
    own only on a PostgreSQL it has to itself (a private stack). Read after the workers exited, so
    their backends have flushed their counts."""
    await asyncio.sleep(1.5)  # a backend flushes its counts at most once a second
    return int(await scalar(settings, _XACTS))


async def memory_events_by_type(settings) -> dict[str, int]:
    """The generation's memory topic read to its end, counted by event type."""
    from schemas.codec import peek_type

    topic = settings.kafka.memory_topic(settings.generation)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    tps = [TopicPartition(topic, p["partition"]) for p in described["partitions"]]
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    counts: dict[str, int] = {}
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        left = {tp: end for tp, end in ends.items() if end > 0}
        while left:
            for tp, records in (await consumer.getmany(timeout_ms=1000, max_records=5000)).items():
                for record in records:
                    kind = peek_type(record.value) or "?"
                    counts[kind] = counts.get(kind, 0) + 1
                if records and records[-1].offset + 1 >= left.get(tp, 0):
                    left.pop(tp, None)
    finally:
        await consumer.stop()
    return counts


async def clean_up(settings, fake, started_at: float) -> None:
    """After a run: the fake LLM stopped, the run's schema and topics dropped, and the stub
    embeddings of its salted texts removed from the shared embedding cache."""
    if fake is not None:
        fake.stop()
    await drop(settings)
    await drop_topics(settings.kafka.bootstrap_servers, settings.kafka.topic_prefix)
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:  # this run's salted texts only
        conn.execute("DELETE FROM public.embedding_cache WHERE created_at >= to_timestamp(%s)"
                     " AND model = 'stub-shake256'", (started_at,))


async def start_workers(settings, count: int, env: dict) -> list:
    processes = []
    for index in range(count):
        log_path = Path(f"/tmp/memory-agent-bench/{settings.generation}-worker{index}.log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        worker_env = child_env(settings, env)
        worker_env["MEMORY_STATE_DIR"] = f"{settings.state_dir}-{index}"
        with log_path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "memory_agent.cli", "worker", env=worker_env, stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        process.log_path = log_path
        processes.append(process)
    return processes


async def start_profilers(processes: list, directory: Path) -> list:
    """py-spy (dev extra) samples each worker from outside, its idle threads left out; the
    collapsed stacks go to DIRECTORY/worker<N>.folded (flamegraph.pl or speedscope read them)."""
    directory.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).with_name("py-spy")
    profilers = []
    for index, process in enumerate(processes):
        profilers.append(await asyncio.create_subprocess_exec(
            str(spy), "record", "--pid", str(process.pid), "--format", "raw", "--rate", "50", "--nonblocking",
            "--output", str(directory / f"worker{index}.folded"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        ))
    return profilers


async def stop_workers(processes: list) -> list[dict]:
    for process in processes:
        if process.returncode is None:
            process.terminate()
    splits = []
    for process in processes:
        try:
            await asyncio.wait_for(process.wait(), 60)
        except TimeoutError:
            process.kill()
            await process.wait()
        found = SPLIT_LINE.findall(process.log_path.read_text(errors="replace"))
        splits.append(json.loads(found[-1]) if found else {})
    return splits


async def run(args, models: str, workers: int) -> dict:
    settings = bench_settings("system", partitions=args.partitions)
    await prepare(settings)
    salt = f" [{uuid.uuid4().hex[:8]}]"
    fake = FakeOpenAI().start() if models == "stub" else None
    env = {"MEMORY_SYSTEMS": '["window", "facts", "topics"]'}
    if fake is not None:
        env |= fake.env(llm=True) | {"MEMORY_EMBEDDING__PROVIDER": "stub"}
    started_at = time.time()
    processes, profilers = [], []
    try:
        async with MemoryClient(settings) as client:
            if args.workload == "generated":
                await produce(client, args.messages, args.conversations, seq_base={}, salt=salt)
            else:  # long dated conversations of realistic message length (bench/burst_workload.py)
                await produce_burst(client, burst(args.workload, args.messages, salt))
        indexed_total = args.messages  # user and assistant messages alike are indexed
        xacts_start = await postgres_transactions(settings)
        polls = 0  # this script's own transactions meanwhile (one per scalar read)
        load_start = os.getloadavg()[0]
        processes = await start_workers(settings, workers, env)
        watched = Processes(settings, processes)
        await watched.find_postgres(settings)
        profilers = await start_profilers(processes, Path(args.profile) / f"{models}-{workers}") if args.profile else []
        clock = time.perf_counter()
        first = first_cpu = None
        max_lag, quiet, samples, group_samples = 0, 0, [], []
        rss_mid, rss_max = None, 0.0  # MB, all workers: when half the messages are indexed; highest polled
        async with Lag(settings) as lag:
            while True:
                await asyncio.sleep(1.0)
                if any(p.returncode is not None for p in processes):
                    raise RuntimeError(f"a worker exited: see {[str(p.log_path) for p in processes]}")
                try:
                    rows = await scalar(settings, "SELECT count(*) FROM messages")
                    indexed = await scalar(settings, "SELECT count(*) FROM message_embeddings")
                    polls += 2
                    behind, groups = await lag.total()
                except (psycopg.OperationalError, KafkaError) as exc:  # a server full or loading: skip this poll
                    print(f"poll skipped: {exc}", file=sys.stderr)
                    continue
                now = time.perf_counter() - clock
                if first is None and rows:
                    first, first_cpu, first_shot = now, sum(cpu_seconds(p.pid) for p in processes), watched.snapshot()
                    first_waits = watched.waits()
                max_lag = max(max_lag, behind)
                rss_now = sum(rss_mb(p.pid)[0] for p in processes)
                rss_max = max(rss_max, rss_now)
                if rss_mid is None and indexed >= indexed_total / 2:
                    rss_mid = rss_now
                samples.append((round(now), rows, indexed, behind))
                group_samples.append((round(now), {g: n for g, n in lag.by_group.items() if n}))
                settled = rows == args.messages and indexed == indexed_total and behind == 0 and groups >= 4
                quiet = quiet + 1 if settled else 0
                if quiet >= 3:
                    break
                if now > args.timeout:
                    raise TimeoutError(f"not settled after {now:.0f} s: last sample {samples[-1]}")
        settled_at = now - 2.0  # the first of the three quiet polls
        cpu = sum(cpu_seconds(p.pid) for p in processes) - first_cpu
        cpu_split = Processes.split(first_shot, watched.snapshot(), args.messages, now - first)
        wait_split = watched.loop_share(first_waits, watched.waits(), now - first)
        load_end = os.getloadavg()[0]
        # The fixed cost of running: every consumer polls the broker and heartbeats with no work
        # to do. On a shared machine the run is slow, so this part weighs on the per-message figure.
        rss_peak = sum(rss_mb(p.pid)[1] for p in processes)
        idle_from, idle_clock = sum(cpu_seconds(p.pid) for p in processes), time.perf_counter()
        idle_shot = watched.snapshot()
        await asyncio.sleep(args.idle_seconds)
        idle_rate = (sum(cpu_seconds(p.pid) for p in processes) - idle_from) / (time.perf_counter() - idle_clock)
        idle_split = {name: split["cores"] for name, split in
                      Processes.split(idle_shot, watched.snapshot(), 1, time.perf_counter() - idle_clock).items()}
        splits = await stop_workers(processes)
        for profiler in profilers:  # py-spy writes its file when its target exits
            await asyncio.wait_for(profiler.wait(), 60)
        xacts = await postgres_transactions(settings) - xacts_start - polls - 1
        summaries = await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'completed'")
        written = await records_by_topic(settings)
        by_type = await memory_events_by_type(settings)
        seconds = settled_at - first
        whole = {k: round(sum(s.get(k, 0) for s in splits), 3) for k in splits[0]} if splits[0] else {}
        model_s = whole.get("embedding_cpu_s", 0) + whole.get("llm_cpu_s", 0)
        per_message = lambda s: round(1000 * s / args.messages, 2)  # noqa: E731
        return {
            "models": models, "workers": workers, "messages": args.messages, "conversations": args.conversations,
            "workload": args.workload,
            "partitions": args.partitions,
            "load_average": {"start": round(load_start, 2), "end": round(load_end, 2)},
            "seconds_first_row_to_settled": round(seconds, 1),
            "sustained_messages_per_s": round(args.messages / seconds, 1),
            "max_consumer_lag_records": max_lag,
            "summaries_completed": summaries,
            "worker_cpu_ms_per_message": per_message(cpu),
            # Every process the run loads, from the first projected row to the settled state (the
            # worker's figure above, with Kafka's, PostgreSQL's, this script's and the rest of the
            # machine's): CPU-ms a message and cores. A machine near its core count bounds the rate.
            "cpu_by_process": cpu_split,
            # Over the same interval, as a share of its wall time: the workers' event loops on a
            # core, runnable but waiting for one (the machine saturated), and asleep (waiting on
            # Kafka, PostgreSQL or for records); threads of the workers and of Kafka waiting for a core.
            "scheduler_share": wait_split,
            # Cores each process used while idle after settling (the same --idle-seconds).
            "idle_cores_by_process": idle_split,
            # CPU-ms per second with nothing to do (all workers), measured after settling, and the
            # per-message figure without it: what a message costs a worker that is kept busy.
            "idle_worker_cpu_ms_per_s": round(1000 * idle_rate, 1),
            "worker_cpu_ms_per_message_minus_idle": per_message(max(0.0, cpu - idle_rate * (now - first))),
            "split_whole_worker_life": {
                "process_cpu_ms_per_message": per_message(whole.get("process_cpu_s", 0)),
                "embedding_ms_per_message": per_message(whole.get("embedding_cpu_s", 0)),
                "llm_client_ms_per_message": per_message(whole.get("llm_cpu_s", 0)),
                "everything_else_ms_per_message": per_message(whole.get("process_cpu_s", 0) - model_s),
                "embedded_texts": whole.get("embedded_texts"),
                "embedded_texts_per_message": round(whole.get("embedded_texts", 0) / args.messages, 2),
                "embedding_cpu_ms_per_text": round(1000 * whole.get("embedding_cpu_s", 0)
                                                   / max(1, whole.get("embedded_texts") or 0), 2),
                # the embedding queue's model thread alone (exact with one intra-op thread)
                "queue_model_cpu_ms_per_text": round(1000 * whole.get("embedding_queue_cpu_s", 0)
                                                     / max(1, whole.get("embedding_queue_texts") or 0), 2),
                "queue_texts_per_batch": round(whole.get("embedding_queue_texts", 0)
                                               / max(1, whole.get("embedding_queue_batches") or 0), 1),
                "embedding_cache": {k: whole.get(f"embedding_cache_{k}") for k in ("hit", "miss", "error")},
            },
            # (seconds since the workers started, messages projected, indexed, total lag): a dozen of them
            # Per message: PostgreSQL transactions the projectors committed, records written to each
            # topic of the run (the conversation topic holds the messages themselves).
            "worker_rss_mb": {"mid_burst": round(rss_mid or 0), "highest_polled": round(rss_max),
                              "peak_vmhwm": round(rss_peak)},
            "projector_transactions_per_message": round(whole.get("projector_transactions", 0) / args.messages, 2),
            # Every PostgreSQL transaction of the workers (projectors, stages' reads, embedding cache,
            # erasure checks, ...) over their whole life: valid on a PostgreSQL of the run's own only.
            "postgres_transactions_per_message": round(xacts / args.messages, 2),
            # Calls of the model (batches the embedding queue ran) and texts it embedded, per message.
            "embedder_calls_per_message": round(whole.get("embedding_queue_batches", 0) / args.messages, 3),
            "embedded_texts_per_message": round(whole.get("embedded_texts", 0) / args.messages, 3),
            "embedding_cache_lookups_per_message": round(
                sum(whole.get(f"embedding_cache_{k}", 0) for k in ("hit", "miss", "error")) / args.messages, 2),
            "records_per_message": {name: round(count / args.messages, 2) for name, count in written.items() if count},
            "memory_events_per_message": {kind: round(count / args.messages, 3) for kind, count in sorted(by_type.items())},
            "lag_samples": " ".join(f"{t}s:{r}/{i}/{b}" for t, r, i, b in samples[:: max(1, len(samples) // 12)]),
            # The consumer groups still behind at each poll (records), once the first row is projected.
            "lag_by_group_samples": [f"{t}s {lags}" for t, lags in group_samples if first is not None and t >= first],
        }
    finally:
        for process in (*processes, *profilers):  # a failed or interrupted run leaves no worker behind
            if process.returncode is None:
                process.kill()
                await process.wait()
        await clean_up(settings, fake, started_at)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--models", choices=["offline", "stub", "both"], default="both")
    parser.add_argument("--workers", default="1", help="comma-separated worker process counts, e.g. 1,2")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--idle-seconds", type=float, default=20, help="idle CPU measured this long after settling")
    parser.add_argument("--workload", choices=WORKLOADS, default="generated",
                        help="generated: one short line per message; longconv / locomo: long dated two-person "
                             "conversations (bench/burst_workload.py), --conversations ignored")
    parser.add_argument("--profile", metavar="DIR", help="sample every worker with py-spy into DIR/<models>-<workers>/")
    args = parser.parse_args()
    results = []
    for models in (["stub", "offline"] if args.models == "both" else [args.models]):
        for workers in (int(w) for w in args.workers.split(",")):
            results.append(await run(args, models, workers))
            print(json.dumps(results[-1]), flush=True)
    report("all systems on a backlog (rough: the machine is shared)", {"runs": results})


if __name__ == "__main__":
    asyncio.run(main())

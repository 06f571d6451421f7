"""Issue 11's fault matrix under steady load, on a PRIVATE Kafka and PostgreSQL.

The shared services (19092/15432) serve every other test: this one starts its own broker and
database on free ports in a temporary state dir with the project's launchers, kills and
stops them, and removes them at the end. Faults, in order, while three conversations keep
talking: worker SIGKILL + restart, broker SIGKILL + restart, PostgreSQL stop while projecting
+ start, and LLM 5xx answers and malformed output throughout. Checked: no message lost or
duplicated, the (restarted) worker heals from the broker and PostgreSQL outages by itself,
and every conversation's summary chain completes. The figures it prints go to docs/faults.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from aiokafka.errors import KafkaError

from infra import kafka as infra_kafka
from infra import launcher
from infra import postgres as infra_postgres
from runtime.client import MemoryClient
from core.settings import KafkaSettings, PostgresSettings, Settings
from projections.migrate import migrate
from runtime.kafka_topics import ensure_topics
from tests.conftest import REPO_ROOT, Stack
from tests.integration.conftest import make_settings, wait_until, worker_process
from tests.support.fake_openai import FakeOpenAI

CONVERSATIONS = ("fm-a", "fm-b", "fm-c")
PER_CONVERSATION = 100  # 300 messages in all
PACE_S = 0.03  # between two messages of the load (about 30 messages/s when nothing is down)


def _free_port(pair: bool = False) -> int:
    """A free port (and port + 1 too, for the Kafka controller, when `pair`)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not pair:
            return port
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port pair")


def _seed_kafka_libs(state_dir: Path) -> None:
    """Hard-link the broker jars of an existing local stack instead of asking Maven again."""
    for candidate in (os.environ.get("MEMORY_TEST_KAFKA_LIBS"), REPO_ROOT / ".state" / "kafka" / "libs"):
        if candidate and (Path(candidate) / ".complete").exists():
            def link(src, dst):
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copy2(src, dst)
            shutil.copytree(candidate, state_dir / "kafka" / "libs", copy_function=link)
            return
    # Otherwise the launcher fetches them with Maven (from ~/.m2 when cached).


@contextlib.contextmanager
def private_stack():
    state_dir = Path(tempfile.mkdtemp(prefix="memfm-", dir="/tmp"))
    base = Settings(
        state_dir=state_dir,
        kafka=KafkaSettings(bootstrap_servers=f"127.0.0.1:{_free_port(pair=True)}"),
        postgres=PostgresSettings(dsn=f"postgresql://postgres@127.0.0.1:{_free_port()}/memory_agent"),
    )
    _seed_kafka_libs(state_dir)
    try:
        launcher.up(base)
        yield base
    finally:
        with contextlib.suppress(Exception):
            launcher.down(base)
        shutil.rmtree(state_dir, ignore_errors=True)


def kill_broker(base: Settings) -> None:
    status = infra_kafka.status(infra_kafka.KafkaConfig.from_settings(base))
    assert status.running and status.pid
    os.kill(status.pid, signal.SIGKILL)
    for _ in range(100):
        if not infra_kafka.status(infra_kafka.KafkaConfig.from_settings(base)).running:
            return
        time.sleep(0.1)


def start_broker(base: Settings) -> None:
    infra_kafka.up(infra_kafka.KafkaConfig.from_settings(base))


def stop_postgres(base: Settings) -> None:
    infra_postgres.down(infra_postgres.PostgresConfig.from_settings(base))


def start_postgres(base: Settings) -> None:
    infra_postgres.up(infra_postgres.PostgresConfig.from_settings(base))


class Load:
    """Three conversations, one message at a time in turn; every send is retried until the
    broker acknowledges it (same event id: a repeat lands on the same seq)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sent = 0
        self.send_retries = 0
        # The test lets the load run up to here, so that every fault happens while it flows.
        self.allowed = 0

    async def run(self) -> None:
        async with MemoryClient(self.settings) as client:
            for seq in range(PER_CONVERSATION):
                for conversation in CONVERSATIONS:
                    role = "user" if seq % 2 == 0 else "assistant"
                    envelope = client.message_event(
                        tenant_id="tenant-a", conversation_id=conversation, user_id="u1", seq=seq, role=role,
                        content=f"{conversation} message {seq}: we keep planning the move to Porto, step {seq}.",
                    )
                    while self.sent >= self.allowed:
                        await asyncio.sleep(0.05)
                    while True:
                        try:
                            await asyncio.wait_for(client.append(envelope), 30)
                            break
                        except (KafkaError, TimeoutError):
                            self.send_retries += 1
                            await asyncio.sleep(0.5)
                    self.sent += 1
                    await asyncio.sleep(PACE_S)

    async def reached(self, count: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.sent < count:
            assert time.monotonic() < deadline, f"load stuck at {self.sent} messages"
            await asyncio.sleep(0.05)


async def query(settings: Settings, sql: str, params=()) -> list[tuple]:
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", connect_timeout=5
    ) as conn:
        return [tuple(row) for row in await (await conn.execute(sql, params)).fetchall()]


async def projected(settings: Settings) -> int:
    try:
        return (await query(settings, "SELECT count(*) FROM messages"))[0][0]
    except psycopg.OperationalError:
        return -1


async def time_to_catch_up(settings: Settings, load: "Load", before: int, timeout: float = 180) -> float:
    """Seconds until the messages projection holds everything the load had sent when the fault
    ended, which includes messages sent while it lasted (more than `before`, the projection's
    count when it began). Race-free: a projector that healed before the first poll passes too."""
    begin = time.monotonic()
    await load.reached(before + 1)
    target = load.sent

    async def caught_up() -> bool:
        return await projected(settings) >= target

    await wait_until(caught_up, timeout, f"projection to reach {target} messages again")
    return time.monotonic() - begin


async def _grew(settings: Settings, start: int) -> bool:
    return await projected(settings) > start


@pytest.mark.asyncio
async def test_fault_matrix_under_steady_load():
    figures: dict[str, float] = {}
    with private_stack() as base:
        settings = make_settings(Stack(base.kafka.bootstrap_servers, base.postgres.dsn),
                                 kafka=KafkaSettings(bootstrap_servers=base.kafka.bootstrap_servers,
                                                     topic_prefix="fm", partitions=2))
        await asyncio.to_thread(migrate, settings)
        await ensure_topics(settings)
        window = settings.window.window_size
        with FakeOpenAI(latency_s=0.05) as fake:
            env = fake.env() | {
                "MEMORY_SYSTEMS": '["window"]', "MEMORY_LLM__CACHE_ENABLED": "false",
                # A request lost to a fault is re-issued after 10 s (default 120 s).
                "MEMORY_WINDOW__REQUEST_TIMEOUT_S": "10", "MEMORY_LLM__BACKOFF_BASE_S": "0.1",
            }
            fake.fail_next(3, status=500)  # the provider's own retries answer these
            load = Load(settings)
            loader = asyncio.create_task(load.run())
            try:
                async with worker_process(settings, log_name="fm-worker-1", extra_env=env) as first:
                    load.allowed = 60
                    await load.reached(60)
                    await wait_until(lambda: _grew(settings, 0), 180, f"first projection (log {first.log_path})")
                    first.send_signal(signal.SIGKILL)
                    await first.wait()
                before = await projected(settings)
                killed_at = time.monotonic()
                load.allowed = 90  # these arrive while no worker runs
                async with worker_process(settings, log_name="fm-worker-2", extra_env=env) as worker:
                    figures["worker SIGKILL: restart -> projecting again (s)"] = await time_to_catch_up(settings, load, before)
                    await wait_until(lambda: _summary_after(settings, killed_at), 180,
                                     f"a summary after the restart (log {worker.log_path})")
                    figures["worker SIGKILL: restart -> summaries again (s)"] = time.monotonic() - killed_at

                    fake.malformed_next(2, "non_json")
                    load.allowed = 160
                    await load.reached(120)
                    before = await projected(settings)
                    await asyncio.to_thread(kill_broker, base)
                    down_at = time.monotonic()
                    await asyncio.sleep(3)
                    await asyncio.to_thread(start_broker, base)
                    figures["broker SIGKILL: down (s)"] = time.monotonic() - down_at
                    figures["broker SIGKILL: back -> projecting again (s)"] = await time_to_catch_up(settings, load, before)

                    fake.fail_next(2, status=503)
                    load.allowed = 240
                    await load.reached(200)
                    before = await projected(settings)
                    await asyncio.to_thread(stop_postgres, base)
                    down_at = time.monotonic()
                    await asyncio.sleep(3)
                    assert worker.returncode is None, f"worker exited while PostgreSQL was down ({worker.log_path})"
                    await asyncio.to_thread(start_postgres, base)
                    figures["PostgreSQL stop: down (s)"] = time.monotonic() - down_at
                    figures["PostgreSQL stop: back -> projecting again (s)"] = await time_to_catch_up(settings, load, before)
                    fake.malformed_next(1, "non_json")

                    load.allowed = len(CONVERSATIONS) * PER_CONVERSATION
                    await asyncio.wait_for(loader, 300)
                    total = len(CONVERSATIONS) * PER_CONVERSATION

                    async def all_projected() -> bool:
                        return await projected(settings) >= total

                    await wait_until(all_projected, 180, f"all {total} messages projected ({worker.log_path})")

                    async def chains_complete() -> bool:
                        rows = await query(
                            settings,
                            "SELECT conversation_id, max(end_sequence) FILTER (WHERE status = 'completed'),"
                            " count(*) FILTER (WHERE status = 'processing') FROM memory GROUP BY conversation_id")
                        return len(rows) == len(CONVERSATIONS) and all(
                            end is not None and end >= PER_CONVERSATION - window and processing == 0
                            for _, end, processing in rows)

                    await wait_until(chains_complete, 240, f"summary chains complete ({worker.log_path})")
                    assert worker.returncode is None, f"the worker exited ({worker.log_path})"
                    log_text = Path(worker.log_path).read_text(errors="replace")
            finally:
                loader.cancel()
                with contextlib.suppress(BaseException):
                    await loader

        # 0 lost, 0 duplicated: every seq once, each with the event id the load sent.
        rows = await query(settings, "SELECT conversation_id, count(*), count(DISTINCT seq), min(seq), max(seq),"
                                     " count(DISTINCT event_id) FROM messages GROUP BY conversation_id ORDER BY 1")
        assert rows == [(c, PER_CONVERSATION, PER_CONVERSATION, 0, PER_CONVERSATION - 1, PER_CONVERSATION)
                        for c in CONVERSATIONS]
        # Exactly one completed summary per window, and every chain link points at a completed one.
        doubled = await query(settings, "SELECT conversation_id, start_sequence, end_sequence FROM memory"
                                        " WHERE status = 'completed' GROUP BY 1, 2, 3 HAVING count(*) > 1")
        assert doubled == [], doubled
        broken = await query(settings, "SELECT m.conversation_id, m.memory_id, b.memory_id, b.status, b.attempt,"
                                       " b.start_sequence, b.end_sequence FROM memory m"
                                       " JOIN memory b ON b.conversation_id = m.conversation_id"
                                       " AND b.memory_id = m.base_memory_id WHERE m.status = 'completed'"
                                       " AND b.status <> 'completed'")
        everything = await query(settings, "SELECT conversation_id, memory_id, start_sequence, end_sequence,"
                                           " base_memory_id, status, attempt FROM memory ORDER BY 1, 2")
        assert broken == [], everything
        failed = (await query(settings, "SELECT count(*) FROM memory WHERE status = 'failed'"))[0][0]
        # The worker rode out both outages itself (this is the process started after the SIGKILL).
        assert "retrying in" in log_text, "the PostgreSQL/broker outage never reached the worker"
    figures["load: sends retried by the producer"] = load.send_retries
    figures["summaries failed (malformed LLM output), then redone"] = failed
    print("\nfault matrix figures:")
    for name, value in figures.items():
        print(f"  {name}: {value:.1f}" if isinstance(value, float) else f"  {name}: {value}")


async def _summary_after(settings: Settings, since: float) -> bool:
    """A summary completed after `since` (a monotonic time: compared through the wall clock)."""
    wall = time.time() - (time.monotonic() - since)
    try:
        rows = await query(settings, "SELECT count(*) FROM memory WHERE status = 'completed'"
                                     " AND completed_at > to_timestamp(%s)", (wall,))
    except psycopg.OperationalError:
        return False
    return rows[0][0] > 0

"""The local launchers really start, reuse, report and stop a working Kafka and PostgreSQL."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from infra import launcher, state
from infra.postgres import PostgresConfig
from tests.integration.conftest import wait_until
from core.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
needs_launchers = pytest.mark.skipif(
    shutil.which("java") is None, reason="the local Kafka launcher needs Java 17+ and Maven"
)


@pytest.fixture(scope="module")
def local_settings() -> Settings:
    """The same services the `stack` fixture starts when there is no Docker."""
    return Settings(state_dir=REPO_ROOT / ".state")


@pytest.fixture
def scratch_dir() -> Iterator[Path]:
    """A private temp dir (0700, as mkdtemp makes it): the launcher must not need to open it up."""
    path = Path(tempfile.mkdtemp(prefix="memory-agent-infra-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@needs_launchers
def test_up_is_idempotent_and_status_reports_running(local_settings: Settings) -> None:
    first = launcher.up(local_settings)
    second = launcher.up(local_settings)

    assert not second.kafka.started and not second.postgres.started
    assert (second.kafka.pid, second.postgres.pid) == (first.kafka.pid, first.postgres.pid)
    current = launcher.status(local_settings)
    assert current.all_running
    assert current.kafka.pid == first.kafka.pid
    assert current.kafka.address == local_settings.kafka.bootstrap_servers
    assert current.postgres.address == PostgresConfig.from_settings(local_settings).address


async def listed(admin: AIOKafkaAdminClient, topic: str) -> bool:
    return topic in await admin.list_topics()


@needs_launchers
async def test_kafka_round_trips_a_record(local_settings: Settings) -> None:
    launcher.up(local_settings)
    bootstrap = local_settings.kafka.bootstrap_servers
    topic = f"test-infra-{uuid.uuid4().hex[:12]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
        # The controller creates it asynchronously: a fresh broker may list it a moment later.
        await wait_until(lambda: listed(admin, topic), 30, f"{topic} listed")
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"hello", key=b"conversation-1")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
        )
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=10_000)
        finally:
            await consumer.stop()
        records = [record for records in batch.values() for record in records]
        assert [(r.key, r.value) for r in records] == [(b"conversation-1", b"hello")]
    finally:
        await admin.delete_topics([topic])
        await admin.close()


@needs_launchers
def test_postgres_has_pgvector_with_hnsw(local_settings: Settings) -> None:
    launcher.up(local_settings)
    with psycopg.connect(local_settings.postgres.dsn) as conn:
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert row.fetchone() == ("0.8.5",)
        conn.execute("CREATE TEMP TABLE items (id int PRIMARY KEY, embedding vector(3))")
        conn.execute("CREATE INDEX ON items USING hnsw (embedding vector_cosine_ops)")
        conn.execute("INSERT INTO items VALUES (1, '[1,0,0]'), (2, '[0,1,0]'), (3, '[0,0,1]')")
        conn.execute("SET enable_seqscan = off")
        nearest = conn.execute(
            "SELECT id FROM items ORDER BY embedding <=> '[0.1,0.9,0]' LIMIT 1"
        ).fetchone()
        plan = conn.execute(
            "EXPLAIN SELECT id FROM items ORDER BY embedding <=> '[0.1,0.9,0]' LIMIT 1"
        ).fetchall()
    assert nearest == (2,)
    assert any("items_embedding_idx" in line for (line,) in plan)


@needs_launchers
def test_down_and_up_again_in_a_separate_state_dir(scratch_dir: Path) -> None:
    """Own state dir and ports, so the shared services the other tests use stay up."""
    kafka_port, postgres_port = _free_ports()
    settings = Settings(
        state_dir=scratch_dir / "state",
        kafka={"bootstrap_servers": f"127.0.0.1:{kafka_port}"},
        postgres={"dsn": f"postgresql://postgres@127.0.0.1:{postgres_port}/scratch"},
    )
    modes = {p: p.stat().st_mode for p in (scratch_dir, *scratch_dir.parents)}
    cluster = PostgresConfig.from_settings(settings).cluster_dir
    shared_jars = REPO_ROOT / ".state" / "kafka" / "libs"
    if (shared_jars / ".complete").exists():
        # Saves a Maven run; the shared state dir's first start already exercised fetching.
        shutil.copytree(shared_jars, scratch_dir / "state" / "kafka" / "libs")
    try:
        cold = launcher.up(settings)
        assert cold.kafka.started and cold.postgres.started
        with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v vector(2))")
            conn.execute("INSERT INTO kept VALUES ('[1,2]')")

        stopped = launcher.down(settings)
        assert not stopped.kafka.running and not stopped.postgres.running
        assert not _listening(kafka_port) and not _listening(postgres_port)
        assert not launcher.status(settings).all_running

        warm = launcher.up(settings)
        assert warm.kafka.started and warm.postgres.started
        assert warm.kafka.pid != cold.kafka.pid
        with psycopg.connect(settings.postgres.dsn) as conn:
            assert conn.execute("SELECT v::text FROM kept").fetchone() == ("[1,2]",)
        if os.geteuid() == 0:
            # As root the cluster lives under the system dir, owned by the service user.
            assert (cluster / "data" / "PG_VERSION").exists()
            assert (scratch_dir / "state" / "postgres" / "cluster").resolve() == cluster
    finally:
        launcher.down(settings)
        # purge removes the cluster outside the state dir too (as root), and the state dir.
        removed, kept = state.purge(settings)
    assert not _listening(kafka_port) and not _listening(postgres_port)
    assert not cluster.exists() and not (scratch_dir / "state").exists() and kept == []
    assert scratch_dir / "state" in removed
    # No folder of the user's had its permissions changed (a private dir stays private).
    assert {p: p.stat().st_mode for p in modes} == modes


@needs_launchers
def test_state_lives_in_the_state_dir_and_purge_removes_all_of_it(tmp_path_factory) -> None:
    """A state dir other users may traverse holds PostgreSQL's cluster even as root; `infra status`
    says where each service keeps its data; `infra purge --yes` stops both and leaves nothing."""
    base = Path(tempfile.mkdtemp(prefix="memory-agent-purge-test-"))
    base.chmod(0o755)  # an ordinary folder (like a checkout under /srv or /home/x)
    kafka_port, postgres_port = _free_ports()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env |= {"MEMORY_STATE_DIR": str(base / "state"), "MEMORY_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{kafka_port}",
            "MEMORY_POSTGRES__DSN": f"postgresql://postgres@127.0.0.1:{postgres_port}/scratch"}
    shared_jars = REPO_ROOT / ".state" / "kafka" / "libs"
    if (shared_jars / ".complete").exists():
        shutil.copytree(shared_jars, base / "state" / "kafka" / "libs")
    (base / "state" / "notes.txt").parent.mkdir(parents=True, exist_ok=True)
    (base / "state" / "notes.txt").write_text("not ours")
    cli = [sys.executable, "-m", "infra.cli"]
    try:
        up = subprocess.run([*cli, "up"], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
        assert up.returncode == 0, up.stderr[-3000:]
        status = subprocess.run([*cli, "status"], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr[-3000:]
        assert f"state dir: {base / 'state'}" in status.stdout
        assert f"postgres data: {base / 'state' / 'postgres' / 'data'}" in status.stdout
        assert f"kafka data: {base / 'state' / 'kafka' / 'data'}" in status.stdout
        assert (base / "state" / "postgres" / "data" / "PG_VERSION").exists()
        assert not PostgresConfig.from_settings(Settings(state_dir=base / "state")).cluster_dir.exists()
        assert _listening(postgres_port)

        purge = subprocess.run([*cli, "purge", "--yes"], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                               timeout=300)
        assert purge.returncode == 0, purge.stderr[-3000:]
        assert not _listening(kafka_port) and not _listening(postgres_port)
        assert sorted(p.name for p in (base / "state").iterdir()) == ["notes.txt"]  # not ours: kept, and said
        assert f"kept {base / 'state' / 'notes.txt'}" in purge.stdout
        assert f"removed {base / 'state' / 'postgres'}" in purge.stdout
    finally:
        subprocess.run([*cli, "down"], env=env, cwd=REPO_ROOT, capture_output=True, timeout=300)
        shutil.rmtree(base, ignore_errors=True)


def test_compose_file_is_well_formed() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["kafka"]["image"] == "apache/kafka:4.1.1"
    assert services["postgres"]["image"] == "pgvector/pgvector:pg16"
    for name in ("migrate", "worker", "api"):
        env = services[name]["environment"]
        assert env["MEMORY_KAFKA__BOOTSTRAP_SERVERS"] == "kafka:9092"
        assert "@postgres:5432/" in env["MEMORY_POSTGRES__DSN"]
    for name in ("worker", "api"):
        condition = services[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _free_ports() -> tuple[int, int]:
    """A Kafka port whose successor (the controller port) is free too, and a Postgres port."""
    rng = random.Random()
    while True:
        base = rng.randrange(30_000, 39_000, 10)
        ports = (base, base + 1, base + 5)
        if all(_bindable(port) for port in ports):
            return base, base + 5


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True

"""Test-session wiring: the `integration` marker and the real Kafka + PostgreSQL `stack`."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]
INTEGRATION_DIR = REPO_ROOT / "tests" / "integration"
KAFKA_IMAGE = "apache/kafka:4.1.1"
POSTGRES_IMAGE = "pgvector/pgvector:pg16"


@dataclass(frozen=True)
class Stack:
    """Where the session's Kafka and PostgreSQL answer (with `vector` installed)."""

    kafka_bootstrap: str
    postgres_dsn: str


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """Services named by MEMORY_TEST_* env vars, else Docker containers, else local launchers.

    Started once per session. Local services are left running afterwards (the launchers
    are idempotent, so the next session reuses them in well under a second).
    """
    kafka_bootstrap = os.environ.get("MEMORY_TEST_KAFKA_BOOTSTRAP")
    postgres_dsn = os.environ.get("MEMORY_TEST_POSTGRES_DSN")
    if kafka_bootstrap and postgres_dsn:
        yield Stack(kafka_bootstrap, postgres_dsn)
    elif _docker_answers():
        with ExitStack() as cleanup:
            yield _containers(cleanup)
    else:
        yield _local_stack()


def _local_stack() -> Stack:
    from infra import launcher
    from infra.process import InfraError

    # Ports come from MEMORY_KAFKA__BOOTSTRAP_SERVERS / MEMORY_POSTGRES__DSN when set.
    settings = Settings(state_dir=REPO_ROOT / ".state")
    try:
        launcher.up(settings)
    except InfraError as exc:
        pytest.fail(f"could not start the local Kafka/PostgreSQL for integration tests:\n{exc}")
    return Stack(settings.kafka.bootstrap_servers, settings.postgres.dsn)


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:  # noqa: BLE001 - no engine, no socket, no permission: all mean "no"
        return False
    return True


def _containers(cleanup: ExitStack) -> Stack:
    """apache/kafka (KRaft) and pgvector/pgvector, stopped when the session ends."""
    import psycopg
    from testcontainers.core.container import DockerContainer

    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # testcontainers < 4.14 has no community namespace
        from testcontainers.postgres import PostgresContainer

    from infra.kafka import wait_until_ready

    # testcontainers' KafkaContainer only drives Confluent images, so configure the
    # official image directly; a fixed host port lets the broker advertise it up front.
    port = _free_port()
    kafka = DockerContainer(KAFKA_IMAGE).with_bind_ports(9092, port)
    for key, value in {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    }.items():
        kafka.with_env(key, value)
    cleanup.enter_context(kafka)
    bootstrap = f"127.0.0.1:{port}"
    wait_until_ready(bootstrap, timeout=120.0)

    postgres = cleanup.enter_context(
        PostgresContainer(POSTGRES_IMAGE, dbname="memory_agent", driver=None)
    )
    dsn = postgres.get_connection_url()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return Stack(bootstrap, dsn)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

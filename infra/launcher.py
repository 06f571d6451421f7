"""Bring the local Kafka and PostgreSQL up, down, or report their status, as one unit."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from infra import kafka, postgres
from infra.process import ServiceStatus
from core.settings import Settings


@dataclass(frozen=True)
class InfraStatus:
    kafka: ServiceStatus
    postgres: ServiceStatus

    @property
    def services(self) -> tuple[ServiceStatus, ServiceStatus]:
        return (self.kafka, self.postgres)

    @property
    def all_running(self) -> bool:
        return all(service.running for service in self.services)


def up(settings: Settings) -> InfraStatus:
    """Start whatever is not running (both at once: a cold Kafka takes the longest)."""
    return _both(
        lambda: kafka.up(kafka.KafkaConfig.from_settings(settings)),
        lambda: postgres.up(postgres.PostgresConfig.from_settings(settings)),
    )


def down(settings: Settings) -> InfraStatus:
    """Stop both services; their data stays in the state dir for the next `up`."""
    return _both(
        lambda: kafka.down(kafka.KafkaConfig.from_settings(settings)),
        lambda: postgres.down(postgres.PostgresConfig.from_settings(settings)),
    )


def status(settings: Settings) -> InfraStatus:
    return InfraStatus(
        kafka.status(kafka.KafkaConfig.from_settings(settings)),
        postgres.status(postgres.PostgresConfig.from_settings(settings)),
    )


def _both(
    kafka_call: Callable[[], ServiceStatus], postgres_call: Callable[[], ServiceStatus]
) -> InfraStatus:
    # Threads, not asyncio: callers may already run an event loop (pytest-asyncio), and the
    # Kafka readiness check runs its own loop via asyncio.run in its thread.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="infra") as pool:
        kafka_future = pool.submit(kafka_call)
        postgres_future = pool.submit(postgres_call)
        # .result() re-raises the first InfraError; the other call still finishes first.
        return InfraStatus(kafka_future.result(), postgres_future.result())

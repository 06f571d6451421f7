"""Riding out outages: "PostgreSQL or Kafka is down" (wait and retry) versus "this record
cannot be applied" (not handled here: a per-record failure, dead-lettered by its caller).

Every projector, stage and agent path of the worker retries a transient failure with a
bounded exponential backoff, logged, for as long as the outage lasts, and resumes by
itself when the dependency comes back; it never exits because of one (issue 11).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
from aiokafka.errors import KafkaError
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

log = logging.getLogger(__name__)

T = TypeVar("T")

# Server-side states that mean "the server (or our session) is going away", not "your data".
_PG_OUTAGE_STATES = (
    pg_errors.AdminShutdown, pg_errors.CrashShutdown, pg_errors.CannotConnectNow, pg_errors.ConnectionException,
    pg_errors.ConnectionFailure, pg_errors.SqlclientUnableToEstablishSqlconnection, pg_errors.TooManyConnections,
)


def is_transient(exc: BaseException) -> bool:
    """True when the database or the broker is unreachable or going away: retry the same work
    later. False for everything a retry cannot fix (bad data, constraint violations, bugs,
    a statement timeout, a record the broker refuses): the caller's per-record handling."""
    if isinstance(exc, PoolTimeout):
        return True
    if isinstance(exc, psycopg.Error):
        if isinstance(exc, _PG_OUTAGE_STATES):
            return True
        if isinstance(exc, psycopg.InterfaceError):  # the connection is closed
            return True
        # A lost connection has no SQLSTATE; a server error with one is about the statement.
        return isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None
    if isinstance(exc, KafkaError):
        return bool(getattr(exc, "retriable", False)) or type(exc).__name__ in (
            "KafkaConnectionError", "KafkaTimeoutError", "NodeNotReadyError", "RequestTimedOutError",
        )
    return isinstance(exc, (ConnectionError, TimeoutError))


class Backoff:
    """Exponential delays with jitter, capped: 0.2, 0.4, 0.8 … `cap` seconds."""

    def __init__(self, first_s: float = 0.2, cap_s: float = 10.0) -> None:
        self.first_s, self.cap_s = first_s, cap_s
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.cap_s, self.first_s * 2 ** min(self.failures, 30))
        self.failures += 1
        return delay * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.failures = 0


async def retry_transient(
    operation: Callable[[], Awaitable[T]], *, what: str, backoff: Backoff | None = None,
    before_retry: Callable[[], Awaitable[None]] | None = None,
) -> T:
    """`operation()` until it succeeds or fails for a reason other than an outage (raised).

    `before_retry` runs before each new attempt (drop a broken connection, reconnect lazily);
    its own transient failures count as one more failed attempt."""
    backoff = backoff or Backoff()
    while True:
        try:
            result = await operation()
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = backoff.next_delay()
            level = logging.WARNING if backoff.failures <= 3 or backoff.failures % 20 == 0 else logging.DEBUG
            log.log(level, "%s: %s: %s; retrying in %.1fs (attempt %d)", what, type(exc).__name__, exc, delay,
                    backoff.failures)
            await asyncio.sleep(delay)
            if before_retry is not None:
                try:
                    await before_retry()
                except Exception as again:  # noqa: BLE001 - judged like the operation's own failure
                    if not is_transient(again):
                        raise
            continue
        if backoff.failures:
            log.warning("%s: recovered after %d failed attempt(s)", what, backoff.failures)
            backoff.reset()
        return result

"""Outage or bad record: what the worker waits out and what it leaves to per-record handling."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, MessageSizeTooLargeError, NodeNotReadyError
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from runtime.outage import Backoff, is_transient, retry_transient


@pytest.mark.parametrize(
    ("exc", "transient"),
    [(psycopg.OperationalError("server closed the connection unexpectedly"), True),  # no SQLSTATE: lost
     (psycopg.InterfaceError("the connection is closed"), True),
     (pg_errors.AdminShutdown("terminating connection due to administrator command"), True),
     (pg_errors.CannotConnectNow("the database system is starting up"), True),
     (pg_errors.TooManyConnections("too many clients"), True),
     (PoolTimeout("couldn't get a connection after 30 sec"), True),
     (KafkaConnectionError("broker down"), True),
     (KafkaTimeoutError(), True),
     (NodeNotReadyError(), True),
     (ConnectionRefusedError(), True),
     # The record, not the outage: the per-record path (dead letter) decides.
     (pg_errors.NumericValueOutOfRange("integer out of range"), False),
     (pg_errors.CharacterNotInRepertoire("invalid byte sequence"), False),
     (pg_errors.UniqueViolation("duplicate key"), False),
     (pg_errors.QueryCanceled("canceling statement due to statement timeout"), False),
     (MessageSizeTooLargeError(), False),
     (ValueError("bug"), False),
     (KeyError("bug"), False)],
)
def test_outages_are_told_apart_from_records_that_cannot_be_applied(exc, transient):
    assert is_transient(exc) is transient


def test_backoff_grows_and_is_capped():
    backoff = Backoff(first_s=0.1, cap_s=2.0)
    delays = [backoff.next_delay() for _ in range(12)]
    assert 0.08 <= delays[0] <= 0.12 and delays[3] > delays[0]
    assert max(delays) <= 2.0 * 1.2
    backoff.reset()
    assert backoff.next_delay() <= 0.12


async def test_retry_waits_out_an_outage_and_reconnects_before_each_retry():
    calls, reconnects = [], []

    async def operation():
        calls.append(1)
        if len(calls) < 4:
            raise psycopg.OperationalError("connection refused")
        return "done"

    async def reconnect():
        reconnects.append(1)
        if len(reconnects) == 1:
            raise psycopg.OperationalError("still down")  # counts as one more failed attempt

    result = await retry_transient(operation, what="test", backoff=Backoff(first_s=0.001), before_retry=reconnect)
    assert result == "done" and len(calls) == 4 and len(reconnects) == 3


async def test_a_record_that_cannot_be_applied_is_raised_at_once():
    calls = []

    async def operation():
        calls.append(1)
        raise pg_errors.NumericValueOutOfRange("integer out of range")

    with pytest.raises(pg_errors.NumericValueOutOfRange):
        await retry_transient(operation, what="test", backoff=Backoff(first_s=0.001))
    assert calls == [1]


async def test_a_long_outage_never_gives_up():
    calls = []

    async def operation():
        calls.append(1)
        if len(calls) < 200:
            raise KafkaConnectionError("down")
        return len(calls)

    assert await asyncio.wait_for(
        retry_transient(operation, what="test", backoff=Backoff(first_s=0.0001, cap_s=0.0005)), 10) == 200

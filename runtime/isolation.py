"""A record the database refuses must not stop a projector: find it, dead-letter it, go on.

A batch is applied in one transaction. When it fails because of what a record holds (the
database refuses a value: out of range, NUL, a check or a unique constraint; or the
projector's own code raises a ValueError-like error on it), the transaction is rolled back
and the batch is applied again in halves, in log order, each in its own transaction,
until the failing record stands alone: that record is dead-lettered (`apply_failed`) in a
transaction that saves its offset, and every other record is applied exactly once.

An error of the infrastructure (the database or the broker unreachable, a timeout) is not
the record's fault: it propagates, and the batch is retried or re-read as a whole.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import psycopg
from aiokafka.structs import ConsumerRecord

log = logging.getLogger(__name__)

# What a record's content can cause. psycopg raises DataError itself for a NUL in a text
# parameter; ProgramLimitExceeded is e.g. an index row too large for its value.
RECORD_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.errors.DataError,
    psycopg.errors.IntegrityError,
    psycopg.errors.ProgramLimitExceeded,
    ValueError,
    TypeError,
    LookupError,
    ArithmeticError,
)


def is_record_error(exc: BaseException) -> bool:
    """The record's fault (dead-letter it), not the infrastructure's (retry)."""
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return False
    return isinstance(exc, RECORD_ERRORS)


def describe(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ")
    return f"{type(exc).__name__}: {text}"[:2000]


ApplyPart = Callable[[Sequence[ConsumerRecord]], Awaitable[None]]
Refuse = Callable[[ConsumerRecord, BaseException], Awaitable[None]]


async def isolate(records: Sequence[ConsumerRecord], error: BaseException, apply_part: ApplyPart,
                  refuse: Refuse) -> int:
    """`records` failed together with `error`: apply them in halves (`apply_part`, one
    transaction each) until each failing record is alone, then `refuse` it. Returns how
    many were refused. Infrastructure errors propagate."""
    if len(records) == 1:
        log.warning("refusing %s[%d]@%d: %s", records[0].topic, records[0].partition, records[0].offset,
                    describe(error))
        await refuse(records[0], error)
        return 1
    refused = 0
    middle = len(records) // 2
    for part in (records[:middle], records[middle:]):
        try:
            await apply_part(part)
        except Exception as exc:  # noqa: BLE001 - sorted into the record's fault or not
            if not is_record_error(exc):
                raise
            refused += await isolate(part, exc, apply_part, refuse)
    return refused

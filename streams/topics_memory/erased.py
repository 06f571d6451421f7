"""The message race for the topic fold (docs/lineage.md, "Messages reached after the erasure").

The topic fold takes a message's text from the log (titles, the events that place it, its
embedding), not from the messages projection. When an erasure is applied before the fold reaches
a message written before it, that text must not come back: the fold applies the rule the
messages projector and the message index apply (domain/erasure.py, through
projections/erased_messages.py: one piece of code), so such a message never reaches the fold.
Its seq becomes one the fold passed over; the gap read (domain/topics/gaps.py) finds it missing
from the projected log (the messages projector left it out under the same rule) and gives it up.

One query on `erasures` per user or assistant message (an index probe on a table that holds one
row per erasure); a generation that never erased answers it from an empty table. While
PostgreSQL does not answer, the fold waits (and says so): going on without the check could
bring erased words back, and failing would stop the fold.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from domain.erasure import LogPosition, erased_by
from projections.erased_messages import applied_erasures
from schemas.codec import Event


def position(record) -> LogPosition:
    """The log position of a faust message (its timestamp is in seconds) or an aiokafka record (ms)."""
    timestamp = record.timestamp
    ms = int(round(timestamp * 1000)) if isinstance(timestamp, float) else int(timestamp or 0)
    return LogPosition(record.partition, record.offset, ms)


log = logging.getLogger(__name__)


class ErasedCheck:
    def __init__(self, pool: AsyncConnectionPool, *, retry_s: float = 1.0, max_retry_s: float = 10.0) -> None:
        self.pool = pool
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s

    async def erasure_of(self, event: Event, record) -> str | None:
        """The id of the applied erasure that covers this message, or None."""
        e = event.envelope
        message = (e.tenant_id, e.conversation_id, e.user_id, record)
        wait = self.retry_s
        while True:
            try:
                async with self.pool.connection() as conn:
                    erasures = await applied_erasures(conn, [message])
                break
            except (psycopg.OperationalError, PoolTimeout) as exc:
                log.warning("topic fold: erasure check of %s seq %s waits for PostgreSQL (%s); again in %.0fs",
                            e.conversation_id, e.seq, exc, wait)
                await asyncio.sleep(wait)
                wait = min(wait * 2, self.max_retry_s)
        return erased_by(erasures, e.tenant_id, e.conversation_id, e.user_id, position(record)) if erasures else None

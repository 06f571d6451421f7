"""The message race for the topic fold (docs/lineage.md, "Messages reached after the erasure").

The topic fold takes a message's text from the log (titles, the events that place it, its
embedding), not from the messages projection. When an erasure is applied before the fold reaches
a message written before it, that text must not come back: the fold applies the rule the
messages projector and the message index apply (domain/erasure.py, through
projections/erased_messages.py: one piece of code), so such a message never reaches the fold.
Its seq becomes one the fold passed over; the gap read (domain/topics/gaps.py) finds it missing
from the projected log (the messages projector left it out under the same rule) and gives it up.

Cost. `erasures` is insert-only (projections/erasure.py inserts one row per applied erasure,
ON CONFLICT DO NOTHING; nothing updates or deletes a row), so its row count is its version. The
check keeps every applied erasure in memory (`ErasureSnapshot`, indexed by tenant+user and
tenant+conversation) together with the count it was read at, and for each message asks
PostgreSQL only `SELECT count(*) FROM erasures` (one prepared statement on a connection of its
own, autocommit: each probe sees every erasure committed before it was sent). The same count:
the snapshot is current and decides; another count: the rows are read again first. So the
message is still checked against every erasure committed before the fold took it, as with the
query per message this replaces, at about a third of its cost (docs/topics.md, "Erased messages").
A count that went down (a row deleted, which the code never does) also reloads; a delete and an
insert between two probes would go unseen, which is why the table must stay insert-only.

While PostgreSQL does not answer, the fold waits (and says so): going on without the check could
bring erased words back, and failing would stop the fold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

import psycopg

from domain.erasure import AppliedErasure, LogPosition, erased_by
from core.settings import Settings
from runtime.db import connect_kwargs
from schemas.codec import Event

log = logging.getLogger(__name__)

_COUNT = "SELECT count(*) FROM erasures"
_ALL = ("SELECT count(*) OVER (), event_id, tenant_id, erased_user_id, conversation_ids, rederive, log_partition,"
        " log_offset, (extract(epoch FROM COALESCE(logged_at, requested_at)) * 1000)::bigint FROM erasures")


def position(record) -> LogPosition:
    """The log position of a faust message (its timestamp is in seconds) or an aiokafka record (ms)."""
    timestamp = record.timestamp
    ms = int(round(timestamp * 1000)) if isinstance(timestamp, float) else int(timestamp or 0)
    return LogPosition(record.partition, record.offset, ms)


class ErasureSnapshot:
    """Every applied erasure, read at one version (the table's row count); pure."""

    def __init__(self, erasures: Iterable[AppliedErasure] = (), version: int = 0) -> None:
        self.version = version
        self.by_user: dict[tuple[str, str], list[AppliedErasure]] = {}
        self.by_conversation: dict[tuple[str, str], list[AppliedErasure]] = {}
        for erasure in erasures:
            if erasure.user_id is not None:
                self.by_user.setdefault((erasure.tenant_id, erasure.user_id), []).append(erasure)
            for conversation in erasure.conversations:
                self.by_conversation.setdefault((erasure.tenant_id, conversation), []).append(erasure)

    def erasure_of(self, tenant_id: str, conversation_id: str, user_id: str, at: LogPosition) -> str | None:
        """The id of an applied erasure that covers this message (domain/erasure.py's rule), or None."""
        candidates = (*self.by_user.get((tenant_id, user_id), ()),
                      *self.by_conversation.get((tenant_id, conversation_id), ()))
        return erased_by(candidates, tenant_id, conversation_id, user_id, at) if candidates else None


def _erasure(row) -> AppliedErasure:
    _, event_id, tenant, user, conversation_ids, rederive, partition, offset, timestamp_ms = row
    return AppliedErasure(event_id, tenant, user, frozenset(conversation_ids) - frozenset(rederive or {}),
                          LogPosition(-1 if partition is None else partition, offset or 0, timestamp_ms))


Connect = Callable[[], Awaitable[psycopg.AsyncConnection]]


def connector(settings: Settings) -> Connect:
    """A connection of the check's own on the generation's schema, autocommit (no transaction
    stays open between probes)."""
    async def connect() -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(settings.postgres.dsn,
                                                     **{**connect_kwargs(settings), "autocommit": True})
    return connect


class ErasedCheck:
    """Called by the fold only (concurrency 1): one probe at a time."""

    def __init__(self, connect: Connect, *, retry_s: float = 1.0, max_retry_s: float = 10.0) -> None:
        self.connect = connect
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self.snapshot: ErasureSnapshot | None = None
        self.reloads = 0
        self._conn: psycopg.AsyncConnection | None = None

    async def erasure_of(self, event: Event, record) -> str | None:
        """The id of the applied erasure that covers this message, or None."""
        e = event.envelope
        snapshot = await self._current(e.conversation_id, e.seq)
        return snapshot.erasure_of(e.tenant_id, e.conversation_id, e.user_id, position(record))

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _current(self, conversation_id: str, seq: int) -> ErasureSnapshot:
        """The snapshot, read again if the table's count moved since: current as of a probe sent now."""
        wait = self.retry_s
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = await self.connect()
                [count] = await (await self._conn.execute(_COUNT, prepare=True)).fetchone()
                if self.snapshot is None or count != self.snapshot.version:
                    rows = await (await self._conn.execute(_ALL)).fetchall()
                    self.snapshot = ErasureSnapshot(map(_erasure, rows), rows[0][0] if rows else 0)
                    self.reloads += 1
                return self.snapshot
            except psycopg.OperationalError as exc:
                log.warning("topic fold: erasure check of %s seq %s waits for PostgreSQL (%s); again in %.0fs",
                            conversation_id, seq, exc, wait)
                await self._drop()
                await asyncio.sleep(wait)
                wait = min(wait * 2, self.max_retry_s)

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - a broken connection; a new one is opened
                pass

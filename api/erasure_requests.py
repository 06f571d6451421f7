"""Repeated erasure requests collapse onto the one in flight, and erasure work is bounded per
tenant (docs/security.md, "Erasure requests").

A request claims (tenant, kind, id) in `erasure_requests` with the event it is about to append.
While the claimed event is not applied yet (no `erasures` row) and is younger than
`PENDING_S`, another request for the same user or conversation gets that event back (202,
nothing appended, no new work for the erasure projector). An applied (or stale) claim is taken
over by the next request, so an erasure asked for after the last one was applied always runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import psycopg

from api.limits import TenantSlots

# A claim older than this is taken over even when its event is not applied yet: a process that
# died between claiming and appending does not block the user's erasure for longer.
PENDING_S = 300
# Erasure requests one tenant has in progress at once in a process; more wait up to the tenant
# queue (MEMORY_API__TENANT_QUEUE_MS), then 429 with Retry-After.
PER_TENANT = 1

_CLAIM = (
    "INSERT INTO erasure_requests AS r (tenant_id, kind, target_id, event_id) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (tenant_id, kind, target_id) DO UPDATE SET event_id = EXCLUDED.event_id,"
    " requested_at = clock_timestamp()"
    " WHERE r.requested_at < clock_timestamp() - make_interval(secs => %s)"
    " OR EXISTS (SELECT 1 FROM erasures e WHERE e.event_id = r.event_id)"
    " RETURNING event_id"
)


async def claim(conn: psycopg.AsyncConnection, tenant: str, kind: str, target: str, event_id: str) -> str | None:
    """None when this request holds the claim now (it appends `event_id`); else the event id of
    the request in flight. Committed at once, so concurrent requests see it."""
    row = await (await conn.execute(_CLAIM, (tenant, kind, target, event_id, PENDING_S))).fetchone()
    if row is None:
        row = await (await conn.execute(
            "SELECT event_id FROM erasure_requests WHERE tenant_id = %s AND kind = %s AND target_id = %s",
            (tenant, kind, target))).fetchone()
    await conn.commit()
    return None if row is None or row[0] == event_id else row[0]


async def release(conn: psycopg.AsyncConnection, tenant: str, kind: str, target: str, event_id: str) -> None:
    """Drop a claim whose event could not be appended (the next request appends its own)."""
    await conn.execute("DELETE FROM erasure_requests WHERE tenant_id = %s AND kind = %s AND target_id = %s"
                       " AND event_id = %s", (tenant, kind, target, event_id))
    await conn.commit()


class ErasureGate:
    """At most PER_TENANT erasure requests of one tenant in progress at once: a flood of one
    tenant's erasures queues behind itself (then 429) and leaves the pool and the key store to
    the others."""

    def __init__(self, queue_s: float) -> None:
        self._slots = TenantSlots(PER_TENANT, queue_s, what="erasure request(s)")

    @contextlib.asynccontextmanager
    async def hold(self, tenant: str) -> AsyncIterator[None]:
        async with self._slots.hold(tenant):
            yield

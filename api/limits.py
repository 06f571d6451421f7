"""Per-tenant share of the API's connection pool: one tenant cannot starve the others."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator

from fastapi import HTTPException, status

SHARED_FRACTION = 0.6  # of the pool, per tenant, when several tenants share it


def tenant_share(configured: int | None, pool_size: int, tenants: int) -> int | None:
    """Pooled connections one tenant may hold at once; None: no share, the whole pool (and only
    the pool's own wait, `pool_timeout_s`, then 503). An explicit setting wins. Otherwise a
    deployment whose keys name one tenant has no share (there is nobody to starve), and with
    several tenants each may hold 60 % of the pool (6 of 10), always leaving at least one
    connection to the others (a pool of 1 is shared 1)."""
    if configured is not None:
        return configured
    if tenants <= 1:
        return None
    return max(1, min(pool_size - 1, math.ceil(pool_size * SHARED_FRACTION)))


class TenantSlots:
    """At most `per_tenant` pooled connections held by one tenant at once; a request beyond it
    waits up to `queue_s` for a slot of its own tenant, then gets 429 with Retry-After.
    `per_tenant=None`: no share (a single-tenant deployment), `hold` lets every request by."""

    def __init__(self, per_tenant: int | None, queue_s: float, what: str = "database reads") -> None:
        self.per_tenant = per_tenant
        self.queue_s = queue_s
        self.what = what
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, tenant: str) -> AsyncIterator[None]:
        if self.per_tenant is None:
            yield
            return
        slots = self._slots.setdefault(tenant, asyncio.Semaphore(self.per_tenant))
        self._users[tenant] = self._users.get(tenant, 0) + 1
        try:
            try:
                if slots.locked():  # wait in line, at most queue_s
                    await asyncio.wait_for(slots.acquire(), self.queue_s)
                else:
                    await slots.acquire()  # free: returns at once
            except TimeoutError:
                raise HTTPException(
                    status.HTTP_429_TOO_MANY_REQUESTS,
                    detail=f"this tenant already has {self.per_tenant} {self.what} in progress; retry shortly",
                    headers={"Retry-After": "1"},
                ) from None
            try:
                yield
            finally:
                slots.release()
        finally:
            self._users[tenant] -= 1
            if not self._users[tenant]:  # forget idle tenants (no unbounded growth)
                del self._users[tenant]
                self._slots.pop(tenant, None)

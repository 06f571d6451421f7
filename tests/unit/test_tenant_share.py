"""The per-tenant share of the API's pool (api/limits.py): its default and its isolation, no I/O."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import HTTPException

from api.limits import TenantSlots, tenant_share
from core.settings import ApiSettings


def test_one_tenant_gets_the_whole_pool_and_several_share_it():
    assert tenant_share(None, 10, 1) is None  # no share: the whole pool, the pool's own wait
    assert tenant_share(None, 10, 2) == 6 and tenant_share(None, 10, 50) == 6
    assert tenant_share(None, 20, 3) == 12
    # Always leaves the others at least one connection; a pool of one is shared as one.
    assert tenant_share(None, 2, 2) == 1 and tenant_share(None, 1, 2) == 1
    assert tenant_share(3, 10, 1) == 3  # an explicit setting wins


def test_the_tenants_are_the_ones_the_keys_name():
    api = ApiSettings(api_keys={"k1": "t1", "k2": {"tenant": "t1", "user": "alice"}, "k3": {"tenant": "t2"}})
    assert api.tenants() == {"t1", "t2"}
    assert ApiSettings(api_keys={"k1": "t1"}).tenants() == {"t1"}
    assert ApiSettings().tenant_max_connections is None


@pytest.mark.asyncio
async def test_a_tenant_at_its_share_is_refused_while_another_tenant_still_gets_a_slot():
    slots = TenantSlots(per_tenant=2, queue_s=0.05)
    release = asyncio.Event()
    held = asyncio.Event()
    holding = 0

    async def hold(tenant: str) -> None:
        nonlocal holding
        async with slots.hold(tenant):
            holding += 1
            if holding == 2:
                held.set()
            await release.wait()

    holders = [asyncio.create_task(hold("a")) for _ in range(2)]
    await asyncio.wait_for(held.wait(), 5)
    with pytest.raises(HTTPException) as refused:
        async with slots.hold("a"):
            pass
    assert refused.value.status_code == 429 and refused.value.headers["Retry-After"] == "1"
    async with slots.hold("b"):  # another tenant is not affected
        pass
    release.set()
    await asyncio.wait_for(asyncio.gather(*holders), 5)
    async with slots.hold("a"):  # freed again
        pass


@pytest.mark.asyncio
async def test_without_a_share_every_request_of_the_tenant_gets_by():
    slots = TenantSlots(per_tenant=None, queue_s=0)
    entered = 0
    release = asyncio.Event()

    async def hold() -> None:
        nonlocal entered
        async with slots.hold("only"):
            entered += 1
            await release.wait()

    async def all_in() -> None:
        while entered < 50:
            await asyncio.sleep(0.01)

    holders = [asyncio.create_task(hold()) for _ in range(50)]
    await asyncio.wait_for(all_in(), 5)  # fifty at once, none refused
    release.set()
    await asyncio.wait_for(asyncio.gather(*holders), 5)

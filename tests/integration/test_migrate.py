"""`migrate` against real PostgreSQL: concurrent migrators of one fresh schema apply it once."""

from __future__ import annotations

import asyncio

from projections.migrate import available_migrations, migrate
from tests.integration.conftest import scalar


async def test_concurrent_migrators_of_a_fresh_schema_apply_each_migration_once(settings):
    fresh = settings.pg_schema + "_concurrent"  # named after the test's generation: dropped with it
    first, second = await asyncio.gather(
        asyncio.to_thread(migrate, settings, fresh), asyncio.to_thread(migrate, settings, fresh)
    )
    every = [m.version for m in available_migrations()]
    assert sorted([[m.version for m in first], [m.version for m in second]]) == [[], every]
    rows = await scalar(settings, f'SELECT array_agg(version ORDER BY version) FROM "{fresh}".schema_migrations')
    assert rows == every
    assert await asyncio.to_thread(migrate, settings, fresh) == []

"""The window summary stage's read session (projections/window_reads.py): its reads run without a
transaction of their own, and the pool's connection goes back transactional for its other users."""

from __future__ import annotations

import psycopg
import pytest

from projections.window_reads import PostgresWindowReads
from runtime.db import make_pool


@pytest.mark.asyncio
async def test_a_session_reads_in_autocommit_and_hands_its_connection_back_transactional(settings):
    async with make_pool(settings, schema=settings.pg_schema) as pool:
        reads = PostgresWindowReads(pool)
        async with reads.session() as session:
            assert await session.settled("t", "c", 1) is None
            assert await session.messages("t", "c", 0, 9) == []
            # no transaction left open by the reads: each was its own (no BEGIN, no COMMIT round trip)
            assert session.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with pytest.raises(psycopg.errors.UndefinedTable):
            async with reads.session() as session:
                await session.conn.execute("SELECT 1 FROM no_such_table")
        for _ in range(pool.max_size):  # every connection the pool lends is transactional again
            async with pool.connection() as conn:
                assert conn.autocommit is False
                await conn.execute("SELECT 1")
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS

"""The API's pool hands out connections in transaction mode, whatever the last request left."""

from __future__ import annotations

from api.app import make_api_pool


async def test_a_connection_returned_in_autocommit_comes_back_transactional(settings) -> None:
    # retrieval.search.record_surfaced switches autocommit on for one statement; a request
    # cancelled inside it returns the connection that way: the next request must not read
    # without a transaction (its one-query reads and the search's COMMIT rely on one).
    settings.postgres.pool_min_size, settings.postgres.pool_max_size = 1, 1
    pool = make_api_pool(settings)
    await pool.open(wait=True)
    try:
        async with pool.connection() as conn:
            await conn.set_autocommit(True)
            left = conn
        async with pool.connection() as conn:
            assert conn is left  # the pool's one connection, not a new one
            assert conn.autocommit is False
            await conn.execute("SELECT 1")
            assert conn.info.transaction_status.name == "INTRANS"
    finally:
        await pool.close()

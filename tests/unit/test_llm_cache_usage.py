"""The LLM cache's usage counts survive a flush cut off by close (they used to be dropped)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from core.llm.cache import LlmCache


class _Database:
    """Stands in for the pool: the first write hangs until cancelled, later ones are recorded."""

    def __init__(self) -> None:
        self.written: list[tuple] = []
        self.entered = asyncio.Event()
        self.hang = True

    async def connection(self):
        database = self

        class _Conn:
            async def execute(self, _sql, params):
                if database.hang:
                    database.entered.set()
                    await asyncio.Event().wait()  # until cancelled
                database.written.append(params)

        @asynccontextmanager
        async def conn():
            yield _Conn()

        return conn()


async def test_a_flush_cancelled_mid_write_by_close_keeps_its_counts_for_the_last_flush():
    cache = LlmCache("postgresql://unused", "p", "g", flush_interval_s=0.0)
    database = _Database()
    cache._connection = database.connection  # no pool is opened
    cache._count("summary", hits=7, calls=2)
    await asyncio.wait_for(database.entered.wait(), 5)  # the flusher is inside its write
    database.hang = False
    await asyncio.wait_for(cache.aclose(), 5)
    assert database.written == [("p", "g", ["summary"], [7], [2])]

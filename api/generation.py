"""Which generation serves reads: looked up in public.memory_generations, cached for a second."""

from __future__ import annotations

import time
import weakref

import psycopg

from core.settings import Settings


class ActiveGeneration:
    """`memory-agent generations activate` switches reads within `ttl_s` on every API replica."""

    def __init__(self, settings: Settings, ttl_s: float = 1.0) -> None:
        self.settings = settings
        self.ttl_s = ttl_s
        self._schema = settings.pg_schema
        self._fetched_at = float("-inf")
        # The schema each pooled connection's search_path was last set to (and committed), so a
        # request on a connection already pointing there sends nothing (two round trips saved).
        self._pointed: weakref.WeakKeyDictionary[psycopg.AsyncConnection, str] = weakref.WeakKeyDictionary()

    async def schema(self, conn: psycopg.AsyncConnection) -> str:
        if time.monotonic() - self._fetched_at > self.ttl_s:
            try:
                cur = await conn.execute(
                    "SELECT name FROM public.memory_generations WHERE topic_prefix = %s AND is_active",
                    (self.settings.kafka.topic_prefix,),
                )
                row = await cur.fetchone()
            except psycopg.errors.UndefinedTable:
                await conn.rollback()
                row = None  # not migrated yet: the configured generation
            self._schema = f"gen_{row[0]}" if row else self.settings.pg_schema
            self._fetched_at = time.monotonic()
        return self._schema

    async def use(self, conn: psycopg.AsyncConnection) -> str:
        """Point the connection's search_path at the active generation; returns its schema."""
        schema = await self.schema(conn)
        if self._pointed.get(conn) != schema:
            await conn.execute("SELECT set_config('search_path', %s, false)", (f"{schema},public",))
            await conn.commit()
            self._pointed[conn] = schema
        elif conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            await conn.commit()  # the lookup's (at most once per ttl_s): hand the connection out idle
        return schema

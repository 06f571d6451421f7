"""What every memory system's agents get from the app: settings, topics, decoding, Postgres."""

from __future__ import annotations

from dataclasses import dataclass, field

import faust
from psycopg_pool import AsyncConnectionPool

from memory_agent.settings import Settings
from projections.db import make_pool
from schemas.codec import Event, decode
from schemas.envelope import InvalidEvent


@dataclass
class StreamContext:
    settings: Settings
    # The truth, keyed by tenant/conversation.
    conversation_events: faust.TopicT
    # This generation's derived events, co-partitioned with the conversation topic.
    memory_events: faust.TopicT
    # Both of the above as one source: an ordered per-conversation fold sees messages
    # and the results of its own requests in log order.
    conversation_and_memory_events: faust.TopicT
    _pool: AsyncConnectionPool | None = field(default=None, repr=False)

    def decode(self, value: bytes) -> Event | None:
        """The event, or None for invalid input (the messages projector dead-letters it)."""
        try:
            return decode(
                value,
                max_event_bytes=self.settings.kafka.max_event_bytes,
                max_content_chars=self.settings.limits.max_content_chars,
            )
        except InvalidEvent:
            return None

    async def pool(self) -> AsyncConnectionPool:
        """A shared pool on this generation's schema, opened on first use."""
        if self._pool is None:
            pool = make_pool(self.settings)
            await pool.open()
            self._pool = pool
        return self._pool

"""What every memory system's agents get from the app: settings, topics, decoding, Postgres."""

from __future__ import annotations

from dataclasses import dataclass, field

import faust
from psycopg_pool import AsyncConnectionPool

from memory_agent.settings import Settings
from projections.db import make_pool
from schemas.codec import Event, decode, peek_type
from schemas.envelope import InvalidEvent
from streams.stages import Stage


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
    # The systems' concurrent stages; the app runs them outside faust (streams/stages.py).
    stages: list[Stage] = field(default_factory=list)
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

    def decode_if(self, value: bytes | None, types: frozenset[str]) -> Event | None:
        """The event if it is one of `types`; others are skipped without parsing them."""
        kind = peek_type(value)
        if kind is not None and kind not in types:
            return None
        event = self.decode(value) if value else None
        return event if event is not None and event.type in types else None

    async def pool(self) -> AsyncConnectionPool:
        """A shared pool on this generation's schema, opened on first use."""
        if self._pool is None:
            pool = make_pool(self.settings)
            await pool.open()
            self._pool = pool
        return self._pool

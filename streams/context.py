"""What every memory system's agents get from the app: settings, topics, decoding, the read model's ports."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import faust

from core import metrics
from core.settings import Settings
from domain.erasure_reads import ErasureReadsFactory, RederiveReadsFactory
from domain.facts.reads import ChunkReadsFactory
from domain.topics.reads import BacklogReadsFactory, TopicReadsFactory
from domain.window.reads import WindowReadsFactory
from runtime.dead_letter import DeadLetter, dead_letter_value, letter_key
from runtime.isolation import describe, is_record_error
from schemas.codec import Event, decode, peek_type
from schemas.envelope import InvalidEvent
from schemas.limits import Limits
from streams.stages import Stage

log = logging.getLogger(__name__)

DECODED_RECORDS = 1024  # the folds run at most a few hundred records apart (faust's buffers)


@dataclass(frozen=True)
class StreamPorts:
    """What the slices' stages read from the read model, as ports (their SQL lives in projections/),
    wired by the roof (memory_agent/worker.py): each a factory of the generation's pool, opened by
    `open_pool` (streams/ imports no database client), but `erasure_reads`, of the settings (a
    connection of its own)."""

    open_pool: Callable[[Settings], Awaitable[Any]] | None = None  # the generation's pool, opened
    window_reads: WindowReadsFactory | None = None  # the window summary stage's (domain/window/reads.py)
    topic_reads: TopicReadsFactory | None = None  # the topic compaction stage's (domain/topics/reads.py)
    backlog_reads: BacklogReadsFactory | None = None  # the topic backlog stage's (domain/topics/reads.py)
    chunk_reads: ChunkReadsFactory | None = None  # the chunk stage's (domain/facts/reads.py)
    rederive_reads: RederiveReadsFactory | None = None  # the re-derive sender's (domain/erasure_reads.py)
    erasure_reads: ErasureReadsFactory | None = None  # the topic fold's erasure check's (domain/erasure_reads.py)


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
    # Where an agent's refusals go (`applying`).
    dead_letters: faust.TopicT | None = None
    ports: StreamPorts = field(default_factory=StreamPorts)
    _pool: Any = field(default=None, repr=False)
    _limits: Limits | None = field(default=None, repr=False)
    # Recently decoded records by the identity of their value: faust hands every agent of a
    # topic the same bytes object, so the three folds decode each record once, not three times.
    # (Events are immutable; the entry holds the bytes, so its id cannot be reused meanwhile.)
    _decoded: dict[int, tuple[bytes, bytes | None, Event]] = field(default_factory=dict, repr=False)

    @property
    def limits(self) -> Limits:
        if self._limits is None:
            self._limits = Limits.of(self.settings)
        return self._limits

    def decode(self, value: bytes | None, *, key: bytes | None) -> Event | None:
        """The event, or None for invalid input or a key that is not the event's own
        conversation (the messages and memory projectors dead-letter those, once). Every
        consumer passes the record's key: a fold keys its state by it."""
        cached = self._decoded.get(id(value))
        if cached is not None and cached[0] is value and cached[1] == key:
            return cached[2]
        try:
            event = decode(value, key=key, limits=self.limits)
        except InvalidEvent as exc:
            metrics.SKIPPED_INVALID.labels(reason=exc.reason).inc()
            return None
        if len(self._decoded) >= DECODED_RECORDS:
            del self._decoded[next(iter(self._decoded))]  # the oldest
        self._decoded[id(value)] = (value, key, event)
        return event

    def decode_if(self, value: bytes | None, types: frozenset[str], *, key: bytes | None) -> Event | None:
        """The event if it is one of `types`; others are skipped without parsing them."""
        kind = peek_type(value)
        if kind is not None and kind not in types:
            return None
        event = self.decode(value, key=key) if value else None
        return event if event is not None and event.type in types else None

    @contextlib.asynccontextmanager
    async def applying(self, stream: faust.StreamT, agent: str) -> AsyncIterator[None]:
        """Around one event's fold step: an error the record causes (runtime/isolation.py)
        dead-letters the record and the stream goes on; any other error propagates."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - sorted into the record's fault or not
            if not is_record_error(exc):
                raise
            message = stream.current_event.message
            log.warning("agent %s refused %s[%d]@%d: %s", agent, message.topic, message.partition, message.offset,
                        describe(exc))
            await self.refuse(message, "apply_failed", describe(exc), stage=f"agent.{agent}")

    async def refuse(self, record, reason: str, detail: str, *, stage: str) -> None:
        """Send a record's dead letter (`record`: anything with topic, partition, offset, key, value)."""
        if self.dead_letters is None:
            log.error("%s refused a record (%s: %s) and has no dead-letter topic", stage, reason, detail)
            return
        value = dead_letter_value(DeadLetter(record, reason, detail), stage=stage,
                                  max_bytes=self.settings.kafka.max_dead_letter_bytes)
        await self.dead_letters.send(key=letter_key(record), value=value, headers=[("reason", reason.encode())])
        metrics.DEAD_LETTERS.labels(stage=stage, reason=reason).inc()

    async def pool(self) -> Any:
        """A shared pool on this generation's schema, opened on first use (by the roof's `open_pool`)."""
        if self._pool is None:
            self._pool = await self._port("open_pool")(self.settings)
        return self._pool

    async def reads(self, name: str) -> Any:
        """The port `name` of `ports` (a `StreamPorts` field) on this generation's read model."""
        factory = self._port(name)
        return factory(self.settings if name in _OWN_CONNECTION else await self.pool())

    def _port(self, name: str) -> Callable:
        factory = getattr(self.ports, name)
        if factory is None:
            raise RuntimeError(f"no {name} wired: make_app(ports=StreamPorts({name}=...)) (memory_agent/worker.py)")
        return factory


_OWN_CONNECTION = frozenset({"erasure_reads"})  # ports made of the settings, not of the pool

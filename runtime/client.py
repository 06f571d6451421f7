"""Producer SDK for upstream chat services: append messages to the conversation log."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from core import telemetry
from core.settings import Settings
from schemas.codec import encode_checked, validate
from schemas.limits import Limits
from schemas.envelope import Envelope
from schemas.registry import MESSAGE_APPENDED, REGISTRY


class MemoryClient:
    """Idempotent (acks=all) producer keyed by conversation, so each conversation stays ordered.

    Use as `async with MemoryClient(settings) as client: await client.append_message(...)`.
    """

    def __init__(self, settings: Settings, *, linger_ms: int = 5) -> None:
        self.settings = settings
        self.limits = Limits.of(settings)
        self.linger_ms = linger_ms
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        if self._producer is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.settings.kafka.bootstrap_servers,
                enable_idempotence=True,
                acks="all",
                linger_ms=self.linger_ms,
                max_request_size=max(1024 * 1024, self.settings.kafka.max_event_bytes + 1024),
            )
            await producer.start()
            self._producer = producer

    async def stop(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def __aenter__(self) -> "MemoryClient":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def message_event(
        self,
        *,
        tenant_id: str,
        conversation_id: str,
        user_id: str,
        seq: int,
        role: str,
        content: str,
        subject_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        event_id: str | None = None,
        occurred_at: datetime | str | None = None,
    ) -> Envelope:
        """Build and validate a message.appended envelope against every rule a consumer checks
        (schemas/limits.py); raises InvalidEvent with a reason code and a clear message."""
        raw = {
            "type": MESSAGE_APPENDED,
            "schema_version": REGISTRY[MESSAGE_APPENDED].version,
            "event_id": event_id or str(uuid.uuid4()),
            "tenant_id": tenant_id,
            "conversation_id": conversation_id,
            "user_id": user_id,
            "subject_id": subject_id,
            "seq": seq,
            # An ISO 8601 string is parsed by the envelope's model like a datetime (a bad one is an
            # InvalidEvent naming the field, never an AttributeError).
            "occurred_at": occurred_at.isoformat() if isinstance(occurred_at, datetime)
            else occurred_at or datetime.now(UTC).isoformat(),
            "payload": {"role": role, "content": content, "metadata": metadata or {}},
        }
        return self.validate_event(raw)

    def validate_event(self, data: dict[str, Any]) -> Envelope:
        """A full event as a dict (any version) -> its checked envelope, or InvalidEvent."""
        envelope = validate(data, limits=self.limits).envelope
        encode_checked(envelope, self.limits)
        return envelope

    async def append_message(self, **fields: Any) -> RecordMetadata:
        """Validate, send and wait for the broker's acknowledgement."""
        return await self.append(self.message_event(**fields))

    async def append(self, envelope: Envelope) -> RecordMetadata:
        """Append one event and wait for the broker's acknowledgement."""
        return await (await self.enqueue(envelope))

    async def enqueue(self, envelope: Envelope) -> asyncio.Future:
        """Queue one event in log order; await the returned future for its acknowledgement.

        Call it sequentially (not from concurrent tasks) when order matters: the
        producer keeps the order of enqueueing within each partition. Raises InvalidEvent
        (nothing sent) for an event a consumer would refuse.
        """
        value = encode_checked(envelope, self.limits)  # nothing a consumer would refuse is sent
        if self.settings.privacy.encrypt_content and envelope.type == MESSAGE_APPENDED:
            from core.privacy import sealed_value  # noqa: PLC0415 - only when sealing is on

            value = await asyncio.to_thread(sealed_value, envelope, self.settings, self.limits)
        await self.start()
        topic = self.settings.kafka.conversation_topic
        # The record carries the append's trace context: the worker's processing of it joins the trace.
        with telemetry.span("append", {"messaging.system": "kafka", "messaging.destination.name": topic,
                                       "memory_agent.event_type": envelope.type}, kind="producer"):
            return await self._producer.send(topic, value=value, key=envelope.key, headers=telemetry.headers())

    async def send_raw(self, value: bytes, key: bytes | None = None) -> RecordMetadata:
        """Append bytes as they are (tests and replaying foreign producers' data)."""
        await self.start()
        return await (await self._producer.send(self.settings.kafka.conversation_topic, value=value, key=key))

    async def flush(self) -> None:
        if self._producer is not None:
            await self._producer.flush()

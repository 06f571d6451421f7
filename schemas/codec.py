"""orjson encoding and strict decoding: bytes -> upcast -> validated event, or InvalidEvent."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import ValidationError

from schemas.envelope import Envelope, InvalidEvent
from schemas.events import MessageAppended, Payload
from schemas.registry import REGISTRY

DEFAULT_MAX_EVENT_BYTES = 512 * 1024
DEFAULT_MAX_CONTENT_CHARS = 32_000


@dataclass(frozen=True)
class Event:
    """A decoded event: the envelope and its payload validated against the type's model."""

    envelope: Envelope
    payload: Payload

    @property
    def type(self) -> str:
        return self.envelope.type


def encode(envelope: Envelope) -> bytes:
    return orjson.dumps(envelope.model_dump(mode="json"))


_TYPE_PREFIX = b'{"type":"'


def peek_type(value: bytes | None) -> str | None:
    """The type of an event encoded by `encode` ("type" comes first) without parsing it;
    None when the bytes are shaped otherwise (then the full decode decides)."""
    if not value or not value.startswith(_TYPE_PREFIX):
        return None
    end = value.find(b'"', len(_TYPE_PREFIX))
    return value[len(_TYPE_PREFIX):end].decode("utf-8", "replace") if end > 0 else None


def new_event(
    type: str,
    payload: Payload,
    *,
    tenant_id: str,
    conversation_id: str,
    user_id: str,
    subject_id: str | None = None,
    seq: int | None = None,
    event_id: str | None = None,
    occurred_at: datetime | None = None,
) -> Envelope:
    """Build an envelope for the current schema version of `type`."""
    spec = REGISTRY[type]
    return Envelope(
        type=type,
        schema_version=spec.version,
        event_id=event_id or str(uuid.uuid4()),
        tenant_id=tenant_id,
        conversation_id=conversation_id,
        user_id=user_id,
        subject_id=subject_id,
        seq=seq,
        occurred_at=occurred_at or datetime.now(UTC),
        payload=payload.model_dump(mode="json"),
    )


def decode(
    raw: bytes,
    *,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    max_content_chars: int = DEFAULT_MAX_CONTENT_CHARS,
) -> Event:
    """Decode and validate one Kafka value; raise InvalidEvent with a stable reason."""
    if raw is None:
        raise InvalidEvent("not_json", "empty value (tombstone)")
    if len(raw) > max_event_bytes:
        raise InvalidEvent("oversized", f"{len(raw)} bytes > limit {max_event_bytes}")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEvent("bad_utf8", str(exc)) from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent("not_json", str(exc)) from None
    if not isinstance(data, dict):
        raise InvalidEvent("not_an_object", f"top level is {type(data).__name__}")
    return validate(data, max_content_chars=max_content_chars)


def validate(data: dict[str, Any], *, max_content_chars: int = DEFAULT_MAX_CONTENT_CHARS) -> Event:
    """Upcast a raw dict to the current version of its type and validate it."""
    event_type = data.get("type")
    spec = REGISTRY.get(event_type) if isinstance(event_type, str) else None
    if spec is None:
        raise InvalidEvent("unknown_type", f"type {event_type!r} is not one of {sorted(REGISTRY)}")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InvalidEvent("invalid_field", f"schema_version must be an integer, got {version!r}")
    if version > spec.version or (version < spec.version and version not in spec.upcasters):
        raise InvalidEvent(
            "unknown_schema_version", f"{event_type} v{version} (this reader knows v1..v{spec.version})"
        )
    while version < spec.version:
        data = spec.upcasters[version](data)
        version += 1
    try:
        envelope = Envelope.model_validate(data)
        payload = spec.payload.model_validate(envelope.payload)
    except ValidationError as exc:
        raise InvalidEvent("invalid_field", _describe(exc)) from None
    if spec.requires_seq and envelope.seq is None:
        raise InvalidEvent("invalid_field", "seq: required for " + spec.type)
    if isinstance(payload, MessageAppended) and len(payload.content) > max_content_chars:
        raise InvalidEvent(
            "content_too_long", f"content has {len(payload.content)} chars > limit {max_content_chars}"
        )
    return Event(envelope=envelope, payload=payload)


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "(event)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)

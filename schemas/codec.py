"""orjson encoding and strict decoding: bytes -> upcast -> validated event, or InvalidEvent."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import ValidationError

from schemas.envelope import Envelope, InvalidEvent
from schemas.events import MessageAppended, Payload
from schemas.limits import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_CONTENT_CHARS,
    DEFAULT_MAX_EVENT_BYTES,
    Limits,
    check_integers,
    check_key,
    check_metadata,
    check_size,
    check_storable,
    raw_needs_walk,
)
from schemas.registry import MESSAGE_APPENDED, REGISTRY
from schemas.sealed import SEALED, open_fields, open_payload, seal_fields

__all__ = ["DEFAULT_MAX_CONTENT_CHARS", "DEFAULT_MAX_EVENT_BYTES", "UNCHECKED", "Event", "Limits", "decode",
           "encode", "encode_checked", "new_event", "validate"]


@dataclass(frozen=True)
class Event:
    """A decoded event: the envelope and its payload validated against the type's model."""

    envelope: Envelope
    payload: Payload

    @property
    def type(self) -> str:
        return self.envelope.type


def encode(envelope: Envelope) -> bytes:
    """The Kafka value of an event; its free text sealed when this process seals (schemas/sealed.py)."""
    return orjson.dumps(seal_fields(envelope).model_dump(mode="json"))


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


class _Unchecked:
    def __repr__(self) -> str:
        return "UNCHECKED"


# `decode(raw)` without a key: for callers that hold no record (tests, tools). Every consumer
# of a topic passes the record's key.
UNCHECKED: Any = _Unchecked()


def _limits(limits: Limits | None, max_event_bytes: int | None, max_content_chars: int | None) -> Limits:
    limits = limits or DEFAULT_LIMITS
    if max_event_bytes is not None or max_content_chars is not None:
        limits = replace(limits, max_event_bytes=max_event_bytes or limits.max_event_bytes,
                         max_content_chars=max_content_chars or limits.max_content_chars)
    return limits


def decode(
    raw: bytes,
    *,
    key: bytes | None = UNCHECKED,
    limits: Limits | None = None,
    max_event_bytes: int | None = None,
    max_content_chars: int | None = None,
) -> Event:
    """Decode and validate one Kafka value (and its key: the event's own conversation);
    raise InvalidEvent with a stable reason (schemas/limits.py has the rules).
    `max_event_bytes`/`max_content_chars` are the older spelling of `limits`."""
    limits = _limits(limits, max_event_bytes, max_content_chars)
    if raw is None:
        raise InvalidEvent("not_json", "empty value (tombstone)")
    if len(raw) > limits.max_event_bytes:
        raise InvalidEvent("oversized", f"{len(raw)} bytes > limit {limits.max_event_bytes}")
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
    event = validate(data, limits=limits, walk_texts=raw_needs_walk(raw), encoded_size=len(raw))
    if key is not UNCHECKED:
        check_key(key, event.envelope)
    return event


def validate(
    data: dict[str, Any],
    *,
    limits: Limits | None = None,
    max_content_chars: int | None = None,
    walk_texts: bool = True,
    encoded_size: int | None = None,
) -> Event:
    """Upcast a raw dict to the current version of its type and validate it against every
    rule of schemas/limits.py but the size of the encoded event (`encode_checked` adds it).
    `walk_texts=False` checks the integers only (the raw bytes showed no text that could fail)."""
    limits = _limits(limits, None, max_content_chars)
    event_type = data.get("type")
    spec = REGISTRY.get(event_type) if isinstance(event_type, str) else None
    if spec is None:
        raise InvalidEvent("unknown_type", f"type {_shown(event_type)} is not one of {sorted(REGISTRY)}")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InvalidEvent("invalid_field", f"schema_version must be an integer, got {_shown(version)}")
    if version > spec.version or (version < spec.version and version not in spec.upcasters):
        raise InvalidEvent(
            "unknown_schema_version", f"{event_type} v{version} (this reader knows v1..v{spec.version})"
        )
    while version < spec.version:
        data = spec.upcasters[version](data)
        version += 1
    try:
        envelope = Envelope.model_validate(data)
        fields = open_fields(envelope) if SEALED in envelope.payload else envelope.payload  # InvalidEvent "erased"
        payload = spec.payload.model_validate(fields)
    except ValidationError as exc:
        raise InvalidEvent("invalid_field", _describe(exc)) from None
    if spec.requires_seq and envelope.seq is None:
        raise InvalidEvent("invalid_field", "seq: required for " + spec.type)
    if isinstance(payload, MessageAppended):
        payload = open_payload(envelope, payload)  # sealed content (schemas/sealed.py)
        if len(payload.content) > limits.max_content_chars:
            raise InvalidEvent(
                "content_too_long", f"content has {len(payload.content)} chars > limit {limits.max_content_chars}"
            )
        check_metadata(payload.metadata, limits, encoded_size)
    if walk_texts:
        check_storable(envelope, payload)
    else:
        check_integers(envelope, payload)
    return Event(envelope=envelope, payload=payload)


def encode_checked(envelope: Envelope, limits: Limits | None = None, payload: Payload | None = None) -> bytes:
    """`encode` for a producer: the bytes, once every rule a consumer checks holds (raises
    InvalidEvent otherwise), so nothing is sent that a consumer would refuse.

    `payload`: the validated model the envelope's payload was dumped from (`new_event`), if the
    caller has it. Then the texts are walked only when the bytes can hold a NUL (`decode`'s own
    shortcut: orjson refuses a lone surrogate, so `encode` raised already) and the integers
    through the model's numeric fields: the same rules, without formatting every node's path."""
    limits = limits or DEFAULT_LIMITS
    if envelope.type not in REGISTRY:
        raise InvalidEvent("unknown_type", f"type {_shown(envelope.type)} is not one of {sorted(REGISTRY)}")
    try:
        raw = encode(envelope)
    except orjson.JSONEncodeError as exc:  # e.g. an integer beyond 64 bits in metadata
        raise InvalidEvent("invalid_field", f"cannot be encoded as JSON: {exc}") from None
    check_size(raw, limits)
    if payload is None or raw_needs_walk(raw):
        check_storable(envelope, envelope.payload)
    else:
        check_integers(envelope, payload)
    if envelope.type == MESSAGE_APPENDED:
        content = envelope.payload.get("content")
        if isinstance(content, str) and len(content) > limits.max_content_chars:
            raise InvalidEvent("content_too_long", f"content has {len(content)} chars > limit {limits.max_content_chars}")
        check_metadata(envelope.payload.get("metadata") or {}, limits, len(raw))
    return raw


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "(event)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)

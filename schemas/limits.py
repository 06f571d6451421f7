"""What every consumer can store: the one set of rules the HTTP door, the SDK and every
reader of a topic check an event against (docs/backbone.md, "Validation").

- integers of the envelope and payloads fit a PostgreSQL `integer` (seq, memory ids, ranges);
  free-form `metadata` is stored as jsonb and may hold any JSON number;
- no text anywhere (ids, content, metadata keys and values, names) holds NUL (U+0000, which
  PostgreSQL text and jsonb refuse) or a lone surrogate (not UTF-8);
- the event fits `max_event_bytes`, its metadata `max_metadata_bytes`, and the dead letter
  that would carry it fits `max_dead_letter_bytes`;
- the Kafka key is the event's own `tenant/conversation`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, get_args

import orjson
from pydantic import BaseModel

from schemas.envelope import Envelope, InvalidEvent

PG_INT_MIN = -(2**31)
PG_INT_MAX = 2**31 - 1

DEFAULT_MAX_EVENT_BYTES = 512 * 1024
DEFAULT_MAX_CONTENT_CHARS = 32_000
DEFAULT_MAX_METADATA_BYTES = 64 * 1024
# The broker and the producers cap a record near 1 MiB; a letter keeps room for its key,
# headers and the record's own framing below that.
DEFAULT_MAX_DEAD_LETTER_BYTES = 900 * 1024
# What a dead letter adds around the original besides the original itself (reason, detail,
# source, timestamps): `dead_letter_value` cuts the detail so this holds.
DEAD_LETTER_OVERHEAD = 4096

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class Limits:
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_content_chars: int = DEFAULT_MAX_CONTENT_CHARS
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES
    max_dead_letter_bytes: int = DEFAULT_MAX_DEAD_LETTER_BYTES

    @classmethod
    def of(cls, settings: Any) -> Limits:
        """From a `core.settings.Settings` (duck-typed: schemas import no settings)."""
        return cls(
            max_event_bytes=settings.kafka.max_event_bytes,
            max_content_chars=settings.limits.max_content_chars,
            max_metadata_bytes=settings.limits.max_metadata_bytes,
            max_dead_letter_bytes=settings.kafka.max_dead_letter_bytes,
        )


DEFAULT_LIMITS = Limits()


def check_size(raw: bytes, limits: Limits) -> None:
    """The encoded event fits a record, and its dead letter (the original as a JSON string,
    where quotes and backslashes double) fits a letter."""
    if len(raw) > limits.max_event_bytes:
        raise InvalidEvent("oversized", f"event is {len(raw)} bytes > limit {limits.max_event_bytes}")
    budget = limits.max_dead_letter_bytes - DEAD_LETTER_OVERHEAD
    if 2 * len(raw) > budget:  # only then can escaping matter: measure it
        escaped = len(orjson.dumps(raw.decode("utf-8", "replace")))
        if escaped > budget:
            raise InvalidEvent(
                "oversized", f"its dead letter would be {escaped} bytes > limit {budget} (quotes and escapes double)"
            )


def check_metadata(metadata: dict[str, Any], limits: Limits, encoded_size: int | None = None) -> None:
    """`encoded_size` of the whole event: metadata cannot be larger, so small events skip
    encoding it again."""
    if not metadata or (encoded_size is not None and encoded_size <= limits.max_metadata_bytes):
        return
    try:
        size = len(orjson.dumps(metadata))
    except orjson.JSONEncodeError as exc:  # e.g. an integer beyond 64 bits
        raise InvalidEvent("invalid_field", f"metadata cannot be encoded as JSON: {exc}") from None
    if size > limits.max_metadata_bytes:
        raise InvalidEvent("metadata_too_large", f"metadata is {size} bytes > limit {limits.max_metadata_bytes}")


def raw_needs_walk(raw: bytes) -> bool:
    """Whether the texts of a raw event need the walk: JSON can only carry a NUL escaped
    (orjson refuses raw control characters and lone surrogates). A false alarm (an escaped
    backslash before "u0000") only costs the walk."""
    return b"\\u0000" in raw


def check_integers(envelope: Envelope, payload: BaseModel) -> None:
    """The integer part of `check_storable` alone: only the fields that can hold one."""
    if envelope.seq is not None and not PG_INT_MIN <= envelope.seq <= PG_INT_MAX:
        _walk(envelope.seq, "seq", free_form=False)
    for name in _numeric_fields(type(payload)):
        _walk(getattr(payload, name), f"payload.{name}", free_form=False)


@functools.cache
def _numeric_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """Fields of a payload model whose type can hold an integer (also in a nested model or list)."""
    return tuple(name for name, info in model.model_fields.items() if _holds_int(info.annotation))


def _holds_int(annotation: Any) -> bool:
    if annotation is int:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return bool(_numeric_fields(annotation))
    return any(_holds_int(arg) for arg in get_args(annotation))


def check_storable(envelope: Envelope, payload: BaseModel | dict[str, Any]) -> None:
    """Every text and integer of the event can be stored by every consumer (see the module);
    `payload` is the validated model or the envelope's dict of it. Only `metadata` is free-form."""
    for name, value in envelope.__dict__.items():
        if name != "payload":
            _walk(value, name, free_form=False)
    for name, value in (payload.__dict__ if isinstance(payload, BaseModel) else payload).items():
        _walk(value, f"payload.{name}", free_form=name == "metadata")


def _walk(value: Any, where: str, *, free_form: bool) -> None:
    if isinstance(value, str):
        bad = _BAD_TEXT.search(value)
        if bad is not None:
            what = "NUL (\\u0000)" if bad.group() == "\x00" else f"a lone surrogate (\\u{ord(bad.group()):04x})"
            raise InvalidEvent("invalid_text", f"{where}: contains {what} at index {bad.start()}")
    elif isinstance(value, bool) or value is None or isinstance(value, float):
        return
    elif isinstance(value, int):
        if not free_form and not PG_INT_MIN <= value <= PG_INT_MAX:
            raise InvalidEvent(
                "out_of_range", f"{where}: {value} is outside the stored integer range {PG_INT_MIN}..{PG_INT_MAX}"
            )
    elif isinstance(value, BaseModel):
        for name, item in value.__dict__.items():
            _walk(item, f"{where}.{name}", free_form=free_form)
    elif isinstance(value, dict):
        # Free-form (metadata) is stored as jsonb, where any number fits; texts are checked.
        for key, item in value.items():
            _walk(key, f"{where} key", free_form=free_form)
            _walk(item, f"{where}.{str(key)[:80]}", free_form=free_form)
    elif isinstance(value, (list, tuple)):
        if value and isinstance(value[0], float) and all(type(item) is float for item in value):
            return  # vectors: nothing to check, and they are long
        for index, item in enumerate(value):
            _walk(item, f"{where}[{index}]", free_form=free_form)


def scrub_text(value: Any) -> Any:
    """A copy of JSON-like `value` whose texts (and keys) lost NUL and lone surrogates: for
    a model's answer, which no rule of ours shaped (an input with them is refused instead)."""
    if isinstance(value, str):
        return _BAD_TEXT.sub("", value)
    if isinstance(value, dict):
        return {scrub_text(k): scrub_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_text(item) for item in value]
    return value


def check_key(key: bytes | None, envelope: Envelope) -> None:
    """The Kafka key must be the event's own conversation: a consumer keys its state by it."""
    if key is None:
        raise InvalidEvent("key_missing", f"record has no key; expected {envelope.key!r}")
    if key != envelope.key:
        shown = key[:120] + (b"..." if len(key) > 120 else b"")
        raise InvalidEvent(
            "key_mismatch", f"key {shown!r} names another conversation than the payload's {envelope.key!r}"
        )

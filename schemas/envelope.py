"""The one envelope every event travels in, and the error raised for invalid input."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, StringConstraints, field_validator

IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$"
Identifier = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=200, pattern=IDENTIFIER)]


class Envelope(BaseModel):
    """Fields shared by every event; `payload` is validated per `type` by the registry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: StrictStr
    schema_version: StrictInt = Field(ge=1)
    event_id: Identifier
    tenant_id: Identifier
    conversation_id: Identifier
    user_id: Identifier
    # Who or what the conversation is about (seed 003's "legacy"); optional.
    subject_id: Identifier | None = None
    # Per conversation, 0-based, set by the producer. Derived events carry the seq
    # of the message that caused them.
    seq: StrictInt | None = Field(default=None, ge=0)
    occurred_at: datetime
    payload: dict[str, Any]

    @field_validator("occurred_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        """A time without a zone is taken as UTC: consumers compare it with aware times."""
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    @property
    def key(self) -> bytes:
        return conversation_key(self.tenant_id, self.conversation_id)


def conversation_key(tenant_id: str, conversation_id: str) -> bytes:
    """Kafka key: one conversation always lands on one partition, in order."""
    return f"{tenant_id}/{conversation_id}".encode()


_KEY = re.compile(r"([A-Za-z0-9][A-Za-z0-9._:@-]{0,199})/([A-Za-z0-9][A-Za-z0-9._:@-]{0,199})")


def parse_conversation_key(key: object) -> tuple[str, str] | None:
    """(tenant, conversation) of a well-formed key, else None (a timer scanning state skips it)."""
    if not isinstance(key, bytes):
        return None
    match = _KEY.fullmatch(key.decode("utf-8", "replace"))
    return (match.group(1), match.group(2)) if match else None


class InvalidEvent(ValueError):
    """Input that cannot become an event; `reason` is a stable code for the dead-letter topic."""

    REASONS = (
        "oversized",
        "bad_utf8",
        "not_json",
        "not_an_object",
        "unknown_type",
        "unknown_schema_version",
        "invalid_field",
        "content_too_long",
        "metadata_too_large",
        "out_of_range",
        "invalid_text",
        "key_missing",
        "key_mismatch",
        # Sealed free text whose key was destroyed (docs/lineage.md): skipped, never dead-lettered.
        "erased",
    )

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in self.REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

"""Payload models of every event type, named as past-tense facts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr


class Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MessageAppended(Payload):
    """A chat message was saved by the upstream chat service (the source of truth)."""

    role: Literal["user", "assistant", "system", "tool"]
    content: StrictStr
    metadata: dict[str, Any] = Field(default_factory=dict)


class SummaryRequested(Payload):
    """The window fold decided to summarize messages start_seq..end_seq."""

    memory_id: StrictInt = Field(ge=1)
    start_seq: StrictInt = Field(ge=0)
    end_seq: StrictInt = Field(ge=0)
    base_memory_id: StrictInt | None = None
    base_end_seq: StrictInt | None = None
    attempt: StrictInt = Field(default=1, ge=1)
    prompt_version: StrictStr
    model: StrictStr


class SummaryCompleted(Payload):
    """The summarizer produced text for a requested window."""

    memory_id: StrictInt = Field(ge=1)
    start_seq: StrictInt = Field(ge=0)
    end_seq: StrictInt = Field(ge=0)
    base_memory_id: StrictInt | None = None
    attempt: StrictInt = Field(default=1, ge=1)
    text: StrictStr
    generation_time_ms: StrictInt = Field(ge=0)
    prompt_version: StrictStr
    model: StrictStr
    source_event_ids: list[StrictStr] = Field(default_factory=list)


class SummaryFailed(Payload):
    """The summarizer gave up on a requested window (error, timeout, bad output)."""

    memory_id: StrictInt = Field(ge=1)
    start_seq: StrictInt = Field(ge=0)
    end_seq: StrictInt = Field(ge=0)
    attempt: StrictInt = Field(default=1, ge=1)
    error: StrictStr
    prompt_version: StrictStr
    model: StrictStr


class WindowTicked(Payload):
    """A timer asked the window fold to look for requests that never came back."""

    reason: StrictStr = "timeout-scan"

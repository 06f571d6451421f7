"""What the memory systems need from a language model, independent of any provider."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Mapping, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One conversation message as the summarizer sees it (`occurred_at`: when it was written,
    used to resolve "yesterday" and to date what is derived from it; None when unknown)."""

    seq: int
    role: str
    content: str
    occurred_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SummaryOutput:
    """A window summary plus what produced it, so every derived row can record both."""

    text: str
    model: str
    prompt_version: str


@dataclass(frozen=True, slots=True)
class SummaryCall:
    """The arguments of one `Summarizer.summarize_window` call."""

    previous_summary: str | None
    new_messages: list[ChatMessage]
    window_start_seq: int
    window_end_seq: int


@dataclass(frozen=True, slots=True)
class JsonOutput:
    """A parsed JSON object answer (chunk summary + facts, gate verdicts, ...)."""

    data: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    prompt_version: str = ""


class LlmError(Exception):
    """The model could not give an answer.

    `retryable` says whether issuing the same request later may succeed (rate limits,
    server errors, timeouts, a malformed answer) or not (bad request, bad key, no such
    model). Providers have already retried transient errors before raising.
    """

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class MalformedOutput(LlmError):
    """The model answered, but not in the required shape (empty, no choices, bad JSON)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message, retryable=retryable)


@runtime_checkable
class Summarizer(Protocol):
    """Incremental sliding-window summarization (seed 000)."""

    @property
    def model(self) -> str: ...

    @property
    def prompt_version(self) -> str: ...

    async def summarize_window(
        self,
        previous_summary: str | None,
        new_messages: list[ChatMessage],
        window_start_seq: int,
        window_end_seq: int,
    ) -> SummaryOutput:
        """Fold `new_messages` into `previous_summary`, dropping what precedes the window."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class JsonCompleter(Protocol):
    """A model that renders a versioned prompt and answers with one JSON object."""

    @property
    def model(self) -> str: ...

    async def complete_json(
        self,
        prompt_version: str,
        variables: Mapping[str, object],
        *,
        model: str | None = None,
        validate: Callable[[dict], object] | None = None,
    ) -> JsonOutput:
        """`validate(data)` may raise to reject the answer (it is then never cached)."""
        ...

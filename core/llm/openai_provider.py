"""Summaries and JSON answers from any OpenAI-compatible chat-completions endpoint."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, Callable, Mapping

import orjson

from core.llm.port import (
    ChatMessage,
    JsonOutput,
    LlmError,
    MalformedOutput,
    SummaryOutput,
)
from core.llm import shared_client
from core.llm.prompts import format_messages, load_prompt
from core import telemetry
from core.metrics import LLM_CLOCK
from core.llm.retry import RetryPolicy, call_with_retries
from core.settings import LlmSettings

log = logging.getLogger(__name__)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class OpenAiLlm:
    """Summarizer + JSON completer over the `openai` client.

    Retries are ours (the client's are off) so the policy is visible and testable; the
    semaphore bounds requests in flight per provider, and is held per attempt, not
    during backoff sleeps.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str = "not-needed",
        timeout_s: float = 60.0,
        max_retries: int = 3,
        concurrency: int = 8,
        summary_prompt_version: str = "summary-v1",
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        temperature: float = 0.0,
        json_mode: bool = True,
    ) -> None:
        self._model = model
        self._summary_prompt = load_prompt(summary_prompt_version)
        self._policy = RetryPolicy(max_retries, backoff_base_s, backoff_max_s)
        self._semaphore = asyncio.Semaphore(concurrency)
        self._temperature = temperature
        self._json_mode = json_mode
        self._client_options = dict(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)
        self._shared = None  # the loop's shared client, taken on the first call (core/llm/shared_client.py)

    @classmethod
    def from_settings(cls, settings: LlmSettings) -> "OpenAiLlm":
        return cls(
            model=settings.model,
            base_url=settings.base_url,
            api_key=settings.api_key.get_secret_value(),
            timeout_s=settings.timeout_s,
            max_retries=settings.max_retries,
            concurrency=settings.concurrency,
            summary_prompt_version=settings.summary_prompt_version,
            backoff_base_s=settings.backoff_base_s,
            backoff_max_s=settings.backoff_max_s,
            temperature=settings.temperature,
            json_mode=settings.json_mode,
        )

    @property
    def model(self) -> str:
        return self._model

    @property
    def prompt_version(self) -> str:
        return self._summary_prompt.version

    async def summarize_window(
        self,
        previous_summary: str | None,
        new_messages: list[ChatMessage],
        window_start_seq: int,
        window_end_seq: int,
    ) -> SummaryOutput:
        first_new = min((m.seq for m in new_messages), default=window_end_seq + 1)
        messages = self._summary_prompt.render(
            {
                "previous_summary": (previous_summary or "").strip()
                or "(none: this is the first summary)",
                "new_messages": format_messages(new_messages),
                "first_new_seq": first_new,
                "window_start": window_start_seq,
                "window_end": window_end_seq,
            }
        )
        text = await self.complete_messages(messages)
        return SummaryOutput(text=text, model=self._model, prompt_version=self.prompt_version)

    async def complete_json(
        self,
        prompt_version: str,
        variables: Mapping[str, object],
        *,
        model: str | None = None,
        validate: Callable[[dict], object] | None = None,
    ) -> JsonOutput:
        """Render a versioned prompt and parse the answer as one JSON object.

        `validate(data)` (the caller's parser) may raise to reject the answer."""
        messages = load_prompt(prompt_version).render(variables)
        model = model or self._model
        content = await self.complete_messages(messages, model=model, json_object=True)
        data = parse_json_object(content)
        if validate is not None:
            validate(data)
        return JsonOutput(data=data, model=model, prompt_version=prompt_version)

    async def complete_messages(
        self,
        messages: list[dict[str, str]],
        *,
        model: str | None = None,
        json_object: bool = False,
    ) -> str:
        """One chat completion; the non-empty content of its first choice.

        Sent with the client's own `post` (its auth, headers, timeouts, HTTP errors and keep-alive
        pool), the body encoded once by orjson and the answer read as bytes: the SDK's typed
        `chat.completions.create` walks every message through its params transform and builds a
        pydantic model of the answer, ~40 % of a call's CPU for nothing we read (docs/scaling.md, "The
        LLM client's CPU and one consumer for the lingering projectors")."""
        body: dict[str, Any] = {
            "model": model or self._model,
            "messages": messages,
            "temperature": self._temperature,
        }
        if json_object and self._json_mode:
            body["response_format"] = {"type": "json_object"}
        encoded = orjson.dumps(body)

        async def attempt() -> bytes:
            async with self._semaphore:
                with LLM_CLOCK:  # the client's CPU while the call is in flight (bench/system_bench.py)
                    return await self._openai().post("/chat/completions", content=encoded, cast_to=bytes)

        with telemetry.span("llm chat", {"gen_ai.operation.name": "chat", "gen_ai.request.model": body["model"]},
                            kind="client"):
            answer = await call_with_retries(
                attempt,
                self._policy,
                what=f"chat completion ({body['model']})",
                wrap=lambda message, retryable: LlmError(message, retryable=retryable),
            )
        return _first_content(answer)

    def _openai(self):
        if self._shared is None:
            self._shared = shared_client.acquire(self._client_options)
        return self._shared.client

    async def aclose(self) -> None:
        if self._shared is not None:
            shared, self._shared = self._shared, None
            await shared_client.release(shared)


def _first_content(answer: bytes) -> str:
    """The stripped content of the first choice of a chat completion's JSON body."""
    try:
        response = orjson.loads(answer)
    except orjson.JSONDecodeError as error:
        raise MalformedOutput(f"chat completion is not JSON: {answer[:200]!r}") from error
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices:
        raise MalformedOutput("chat completion has no choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or not content.strip():
        raise MalformedOutput("chat completion has empty content")
    return content.strip()


def parse_json_object(content: str) -> dict[str, Any]:
    """Parse a JSON object answer, tolerating a ```json fence; MalformedOutput otherwise."""
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise MalformedOutput(f"answer is not valid JSON: {error}: {content[:200]!r}") from error
    if not isinstance(data, dict):
        raise MalformedOutput(f"answer is JSON but not an object: {content[:200]!r}")
    return data

"""Retry transient OpenAI-API errors with exponential backoff and jitter."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

# `openai` is imported where it is used: it takes ~1.3 s to import, and a process that
# never calls the model (a replay served by the cache, the CLI) should not pay for it.

log = logging.getLogger(__name__)
T = TypeVar("T")

# 408 request timeout and 409 lock timeout are transient too (the openai client agrees).
_RETRYABLE_STATUS = frozenset({408, 409, 429})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0

    def delay(self, attempt: int, rng: random.Random, retry_after_s: float | None = None) -> float:
        """Backoff before retry number `attempt` (0-based): full exponential, 50-100% jitter."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        delay = ceiling * (0.5 + 0.5 * rng.random())
        if retry_after_s is not None:  # the server knows best, within our own cap
            delay = max(delay, min(retry_after_s, self.backoff_max_s))
        return delay


def is_transient(error: BaseException) -> bool:
    """Rate limits, server errors, timeouts and connection failures may pass on retry."""
    import openai

    if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code >= 500 or error.status_code in _RETRYABLE_STATUS
    return False


def _retry_after(error: BaseException) -> float | None:
    response = getattr(error, "response", None)
    if response is None:
        return None
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    what: str,
    wrap: Callable[[str, bool], Exception],
    rng: random.Random | None = None,
) -> T:
    """Await `call()`; retry transient errors; raise `wrap(message, retryable)` at the end."""
    import openai

    rng = rng or random.Random()
    attempt = 0
    while True:
        try:
            return await call()
        except openai.OpenAIError as error:
            transient = is_transient(error)
            if not transient or attempt >= policy.max_retries:
                tries = attempt + 1
                raise wrap(f"{what} failed after {tries} attempt(s): {error!r}", transient) from error
            delay = policy.delay(attempt, rng, _retry_after(error))
            log.warning("%s: %r, retry %d/%d in %.2fs", what, error, attempt + 1,
                        policy.max_retries, delay)
            attempt += 1
            await asyncio.sleep(delay)

"""One `openai` client per event loop and endpoint, shared by every OpenAiLlm of the process."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

# loop -> {client options: [client, holders]}. Keyed by loop because an httpx pool belongs to the
# loop it was used on (tests run many loops in one process); weak, so a loop that ends forgets it.
_CLIENTS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, list[Any]]]" = weakref.WeakKeyDictionary()


def _key(options: dict[str, Any]) -> tuple:
    return tuple(sorted(options.items()))


def acquire(options: dict[str, Any]) -> Any:
    """The loop's `AsyncOpenAI` for these options (base URL, key, timeout), built on first use;
    the window, facts and topic stages then share one client and one keep-alive pool."""
    from openai import AsyncOpenAI  # ~1 s to import: the worker preloads it (runtime/llm_factory.py)

    by_options = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    entry = by_options.get(_key(options))
    if entry is None:
        entry = by_options[_key(options)] = [AsyncOpenAI(**options), 0]
    entry[1] += 1
    return entry[0]


async def release(options: dict[str, Any], client: Any) -> None:
    """One holder fewer; the last one closes the client (its connections)."""
    by_options = _CLIENTS.get(asyncio.get_running_loop(), {})
    entry = by_options.get(_key(options))
    if entry is None or entry[0] is not client:  # acquired on another loop: close it alone
        await client.close()
        return
    entry[1] -= 1
    if entry[1] <= 0:
        del by_options[_key(options)]
        await client.close()

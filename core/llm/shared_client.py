"""One `openai` client per event loop and endpoint, shared by every OpenAiLlm of the process."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any


class SharedClient:
    """An `AsyncOpenAI` and how many providers hold it; the last `release` closes it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: Any) -> None:
        self.loop, self.client, self.holders, self.closed = loop, client, 0, False


# (loop, client options) -> the shared client while some provider holds it: weak values, so a
# client no provider holds any more (one never closed, e.g. in a test) is not kept alive here.
# Per loop, because an httpx pool belongs to the loop it was used on (tests run many loops).
_SHARED: "weakref.WeakValueDictionary[tuple, SharedClient]" = weakref.WeakValueDictionary()


def acquire(options: dict[str, Any]) -> SharedClient:
    """The loop's client for these options (base URL, key, timeout), built on first use: the window,
    facts and topic stages of a worker share one client and one keep-alive pool."""
    from openai import AsyncOpenAI  # ~1 s to import: the worker preloads it (runtime/llm_factory.py)

    loop = asyncio.get_running_loop()
    key = (id(loop), tuple(sorted(options.items())))
    shared = _SHARED.get(key)
    if shared is None or shared.closed or shared.loop is not loop:
        shared = _SHARED[key] = SharedClient(loop, AsyncOpenAI(**options))
    shared.holders += 1
    return shared


async def release(shared: SharedClient) -> None:
    """One holder fewer; the last one closes the client (its connections)."""
    shared.holders -= 1
    if shared.holders <= 0 and not shared.closed:
        shared.closed = True
        await shared.client.close()

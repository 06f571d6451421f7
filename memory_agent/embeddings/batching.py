"""Concurrent single-text embedding calls served as one batch (continuous micro-batching).

Every turn-start context embeds one query. Under concurrent requests, one model call per
request (each in its own thread, each wanting every core) is the slowest way to run a small
encoder; one call over a batch of queries costs little more than one over a single query.
While a batch runs, new queries queue up and go together in the next one, so a lone
request pays no extra wait and a crowd shares the model calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import numpy as np


class MicroBatcher:
    def __init__(self, run_batch: Callable[[list[str]], Awaitable[np.ndarray]], *, max_batch: int = 32) -> None:
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._pending: list[tuple[str, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None
        self.batches = 0  # model calls made (for tests and metrics)

    async def embed(self, text: str) -> np.ndarray:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((text, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain(), name="embedding-micro-batches")
        return await future

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:self._max_batch], self._pending[self._max_batch:]
            waiting = [(text, future) for text, future in batch if not future.done()]  # callers may have left
            if not waiting:
                continue
            try:
                vectors = await self._run_batch([text for text, _ in waiting])
            except Exception as error:  # every caller of this batch gets the error, the next batch runs
                _settle(waiting, error=error)
                continue
            _settle(waiting, vectors=vectors)


def _settle(waiting: Sequence[tuple[str, asyncio.Future]], *, vectors=None, error: Exception | None = None) -> None:
    for index, (_, future) in enumerate(waiting):
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(vectors[index])

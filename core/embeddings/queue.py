"""One embedding queue per model: concurrent requests coalesced into length-sorted batches on one thread.

Every caller of a process (stages, message index, topic recall, API queries) submits its texts
here; a single model thread takes what is pending (lingering briefly when it was idle), sorts the
texts by length (little padding), runs them in batches of `batch_size` and hands each request its
own rows back as soon as they are done. A request marked `urgent` (a query a person waits on:
the context endpoint's) is never lingered for: an idle model runs it at once, a busy one takes it
with whatever queued meanwhile. Requests may come from any thread or event loop. A failing
batch is retried text by text, so one bad request fails alone. The queue is bounded: a caller
waits (without blocking its event loop) while `max_pending` texts are not yet embedded.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from core.embeddings.port import EmbeddingError
from core.metrics import EMBEDDING_QUEUE_BATCHES, EMBEDDING_QUEUE_CPU, EMBEDDING_QUEUE_TEXTS

RunBatch = Callable[[list[str]], np.ndarray]  # blocking: (len(texts), d) float32 rows


@dataclass(eq=False)
class _Request:
    texts: list[str]
    future: Future
    out: np.ndarray | None = None
    left: int = 0
    error: BaseException | None = None
    rows: list[int] = field(default_factory=list)
    urgent: bool = False


class EmbeddingQueue:
    """`run_batch` (the model, blocking) is only ever called from this queue's one thread."""

    def __init__(self, run_batch: RunBatch, dimensions: int, *, batch_size: int = 32, linger_s: float = 0.002,
                 max_pending: int = 4096, pool_batches: int = 4, name: str = "embedding-queue") -> None:
        if batch_size < 1 or max_pending < 1 or pool_batches < 1 or linger_s < 0:
            raise ValueError("batch_size, max_pending and pool_batches must be >= 1, linger_s >= 0")
        self.run_batch, self.dimensions = run_batch, dimensions
        self.batch_size, self.linger_s, self.max_pending = batch_size, linger_s, max_pending
        self.pool_texts = batch_size * pool_batches  # texts sorted together in one cycle
        self._lock = threading.Condition()
        self._requests: deque[_Request] = deque()
        self._queued_texts = 0  # texts of self._requests
        self._pending_texts = 0  # submitted and not yet answered (what max_pending bounds)
        self._urgent = 0  # queued requests marked urgent: the model thread does not linger for them
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._closed = False
        self.batches_run = 0  # model calls (for tests and metrics)
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return self._pending_texts

    async def embed(self, texts: Sequence[str], *, urgent: bool = False) -> np.ndarray:
        """(len(texts), dimensions) rows in the order of `texts`; waits while the queue is full.
        `urgent`: someone waits on it now (a query), so an idle model does not linger for company."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._closed:
                    raise EmbeddingError("the embedding queue is closed", retryable=False)
                if self._pending_texts == 0 or self._pending_texts + len(texts) <= self.max_pending:
                    future = self._enqueue(texts, urgent)
                    break
                waiter = loop.create_future()
                self._waiters.append((loop, waiter))
            await waiter  # woken when texts are answered or the queue closes
        return await asyncio.wrap_future(future)

    def _enqueue(self, texts: list[str], urgent: bool = False) -> Future:
        request = _Request(texts, Future(), left=len(texts), urgent=urgent)
        self._pending_texts += len(texts)
        self._queued_texts += len(texts)
        self._urgent += urgent
        self._requests.append(request)
        self._lock.notify_all()
        return request.future

    def close(self) -> None:
        """No new request; what is queued is still embedded, then the thread ends."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._wake_waiters()

    async def aclose(self) -> None:
        self.close()
        await asyncio.to_thread(self._thread.join)

    # --- the model thread -----------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            cycle = self._take()
            if cycle is None:
                return
            try:
                self._run_cycle(cycle)
            finally:
                self._answer(cycle)

    def _take(self) -> list[_Request] | None:
        """The next requests, up to `pool_texts` texts (one request at least); None once closed and empty."""
        with self._lock:
            while not self._requests:
                if self._closed:
                    return None
                self._lock.wait()
            if self._queued_texts < self.batch_size and self.linger_s and not self._closed and not self._urgent:
                self._lock.wait_for(lambda: self._queued_texts >= self.batch_size or self._closed or self._urgent,
                                    self.linger_s)
            cycle, texts = [], 0
            while self._requests and (not cycle or texts + len(self._requests[0].texts) <= self.pool_texts):
                request = self._requests.popleft()
                self._queued_texts -= len(request.texts)
                self._urgent -= request.urgent
                texts += len(request.texts)
                if request.future.set_running_or_notify_cancel():
                    cycle.append(request)
                else:  # its caller was cancelled before it ran
                    self._pending_texts -= len(request.texts)
            return cycle

    def _run_cycle(self, cycle: list[_Request]) -> None:
        items = [(len(text), request, row) for request in cycle for row, text in enumerate(request.texts)]
        items.sort(key=lambda item: item[0])
        for request in cycle:
            request.out = np.empty((len(request.texts), self.dimensions), dtype=np.float32)
        for batch in similar_lengths(items, self.batch_size):
            self._run_batch([(request, row) for _, request, row in batch])

    def _run_batch(self, batch: list[tuple[_Request, int]]) -> None:
        started = time.thread_time()
        try:
            vectors = self.run_batch([request.texts[row] for request, row in batch])
            self.batches_run += 1
            EMBEDDING_QUEUE_BATCHES.inc()
            EMBEDDING_QUEUE_TEXTS.inc(len(batch))
            EMBEDDING_QUEUE_CPU.inc(time.thread_time() - started)
        except Exception as error:  # noqa: BLE001 - one bad text must not fail the other callers
            if len(batch) > 1:
                for one in batch:  # each text alone: only the request holding the bad one fails
                    self._run_batch([one])
                return
            vectors = None
            batch[0][0].error = batch[0][0].error or _as_embedding_error(error)
        for i, (request, row) in enumerate(batch):
            if vectors is not None:
                request.out[row] = vectors[i]
            request.left -= 1
            if request.left == 0:
                self._finish(request)

    def _finish(self, request: _Request) -> None:
        if request.future.done():
            return
        with self._lock:  # room first: a caller that sees its answer sees the queue without it
            self._pending_texts -= len(request.texts)
        if request.error is not None:
            request.future.set_exception(request.error)
        else:
            request.future.set_result(request.out)
        self._wake_waiters()

    def _answer(self, cycle: list[_Request]) -> None:
        """Whatever the cycle left unanswered (the model thread itself failed) gets an error."""
        for request in cycle:
            if not request.future.done():
                request.error = request.error or EmbeddingError("the embedding queue failed", retryable=True)
                self._finish(request)

    def _wake_waiters(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            try:
                loop.call_soon_threadsafe(_wake, waiter)
            except RuntimeError:  # that loop is closed: its caller is gone
                pass


def similar_lengths(items: list, batch_size: int, spread: float = 1.25, slack: int = 16) -> list[list]:
    """`items` (sorted by their first field, the text's length) cut into batches of at most
    `batch_size` whose longest text is at most `spread` x the shortest (+ `slack` characters): a
    batch is padded to its longest text, so mixing lengths costs more than running more batches."""
    batches: list[list] = []
    for item in items:
        if batches and len(batches[-1]) < batch_size and item[0] <= batches[-1][0][0] * spread + slack:
            batches[-1].append(item)
        else:
            batches.append([item])
    return batches


def _as_embedding_error(error: Exception) -> EmbeddingError:
    if isinstance(error, EmbeddingError):
        return error
    wrapped = EmbeddingError(f"embedding failed: {type(error).__name__}: {error}", retryable=False)
    wrapped.__cause__ = error
    return wrapped


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)

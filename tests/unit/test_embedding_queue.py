"""EmbeddingQueue: concurrent callers share length-sorted batches on one thread, each gets its own rows
(or its own error), the queue is bounded and closes cleanly; make_embedder shares one per process."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from core.embeddings import EmbeddingError, make_embedder
from core.embeddings.queue import EmbeddingQueue
from core.embeddings.queued import shared_count
from core.embeddings.stub import StubEmbedder
from core.settings import EmbeddingSettings, Settings

STUB = StubEmbedder(8)


class GatedModel:
    """The stub's vectors; every call recorded; the first call (or every one) holds the model thread
    until `release()`, so requests pile up behind it as they do behind a busy model."""

    def __init__(self, *, hold_first: bool = True, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.entered, self.gate = threading.Event(), threading.Event()
        self.hold_first, self.fail_on = hold_first, fail_on
        if not hold_first:
            self.gate.set()

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.entered.set()
        self.gate.wait(10)
        if self.fail_on is not None and any(self.fail_on in t for t in texts):
            raise ValueError(f"cannot embed {self.fail_on!r}")
        return STUB.embed_sync(texts)

    def release(self) -> None:
        self.gate.set()

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 10)


async def until(condition) -> None:
    """Poll (no sleep-and-hope): the condition becomes true while the test waits."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never became true")


def expected(texts: list[str]) -> np.ndarray:
    return STUB.embed_sync(texts)


async def test_concurrent_callers_share_one_length_sorted_batch_and_get_their_own_rows_in_order():
    model = GatedModel()
    queue = EmbeddingQueue(model, 8, batch_size=32, linger_s=0)
    first = asyncio.create_task(queue.embed(["busy"]))
    await model.wait_entered()  # the model is busy: the next callers wait together
    callers = [["a longer text", "b"], ["cc", "a medium"], ["dddd"]]  # lengths close enough for one batch
    tasks = [asyncio.create_task(queue.embed(texts)) for texts in callers]
    await until(lambda: queue.pending == 6)
    model.release()
    results = await asyncio.gather(*tasks)
    await first
    assert len(model.calls) == 2  # the three callers in one model call
    batch = model.calls[1]
    assert sorted(batch) == sorted(t for texts in callers for t in texts)
    assert [len(t) for t in batch] == sorted(len(t) for t in batch)  # sorted by length
    for texts, rows in zip(callers, results):
        np.testing.assert_array_equal(rows, expected(texts))  # each caller's rows, in its order
    await queue.aclose()


def test_batches_group_texts_of_similar_length():
    from core.embeddings.queue import similar_lengths

    items = [(n, None, i) for i, n in enumerate([5, 10, 20, 30, 40, 100, 110, 120, 400])]
    batches = similar_lengths(items, batch_size=3)
    assert [[n for n, _, _ in b] for b in batches] == [[5, 10, 20], [30, 40], [100, 110, 120], [400]]


async def test_batches_hold_at_most_batch_size_texts():
    model = GatedModel(hold_first=False)
    queue = EmbeddingQueue(model, 8, batch_size=4, linger_s=0)
    texts = [f"text {i} " + "x" * (i % 5) for i in range(10)]
    np.testing.assert_array_equal(await queue.embed(texts), expected(texts))
    assert [len(c) for c in model.calls] == [4, 4, 2]
    await queue.aclose()


async def test_a_failing_text_fails_its_own_caller_only():
    model = GatedModel(fail_on="boom")
    queue = EmbeddingQueue(model, 8, batch_size=32, linger_s=0)
    first = asyncio.create_task(queue.embed(["busy"]))
    await model.wait_entered()
    good = asyncio.create_task(queue.embed(["fine", "also fine"]))
    bad = asyncio.create_task(queue.embed(["ok", "boom"]))
    other = asyncio.create_task(queue.embed(["more"]))
    await until(lambda: queue.pending == 6)
    model.release()
    np.testing.assert_array_equal(await good, expected(["fine", "also fine"]))
    np.testing.assert_array_equal(await other, expected(["more"]))
    with pytest.raises(EmbeddingError, match="boom") as raised:
        await bad
    assert raised.value.retryable is False and isinstance(raised.value.__cause__, ValueError)
    await first
    assert queue.pending == 0
    np.testing.assert_array_equal(await queue.embed(["after"]), expected(["after"]))  # the queue goes on
    await queue.aclose()


async def test_callers_wait_while_the_queue_is_full_and_go_on_when_it_drains():
    model = GatedModel()
    queue = EmbeddingQueue(model, 8, batch_size=32, linger_s=0, max_pending=3)
    first = asyncio.create_task(queue.embed(["one", "two", "three"]))
    await model.wait_entered()
    late = asyncio.create_task(queue.embed(["four"]))
    await until(lambda: len(queue._waiters) == 1)  # waiting for room, its text not queued
    assert queue.pending == 3 and not late.done()
    model.release()
    np.testing.assert_array_equal(await late, expected(["four"]))
    await first
    assert [c for c in model.calls] == [["one", "two", "three"], ["four"]]
    await queue.aclose()


async def test_a_request_larger_than_the_bound_goes_through_an_empty_queue():
    queue = EmbeddingQueue(GatedModel(hold_first=False), 8, batch_size=2, linger_s=0, max_pending=2)
    texts = [f"t{i}" for i in range(5)]
    np.testing.assert_array_equal(await queue.embed(texts), expected(texts))
    await queue.aclose()


async def test_a_cancelled_caller_gives_its_room_back():
    model = GatedModel()
    queue = EmbeddingQueue(model, 8, batch_size=32, linger_s=0)
    first = asyncio.create_task(queue.embed(["busy"]))
    await model.wait_entered()
    cancelled = asyncio.create_task(queue.embed(["never embedded"]))
    await until(lambda: queue.pending == 2)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    model.release()
    await first
    np.testing.assert_array_equal(await queue.embed(["next"]), expected(["next"]))
    assert ["never embedded"] not in model.calls and queue.pending == 0
    await queue.aclose()


async def test_close_answers_what_is_queued_then_refuses_and_ends_the_thread():
    model = GatedModel()
    queue = EmbeddingQueue(model, 8, batch_size=32, linger_s=0)
    first = asyncio.create_task(queue.embed(["busy"]))
    await model.wait_entered()
    queued = asyncio.create_task(queue.embed(["queued before close"]))
    await until(lambda: queue.pending == 2)
    closing = asyncio.create_task(queue.aclose())
    await until(lambda: queue._closed)
    with pytest.raises(EmbeddingError, match="closed"):
        await queue.embed(["too late"])
    model.release()
    np.testing.assert_array_equal(await queued, expected(["queued before close"]))
    await first
    await closing
    assert not queue._thread.is_alive()


async def test_callers_on_other_threads_and_loops_share_the_queue():
    model = GatedModel(hold_first=False)
    queue = EmbeddingQueue(model, 8, batch_size=32, linger_s=0)
    other = await asyncio.to_thread(asyncio.run, queue.embed(["from another loop"]))
    np.testing.assert_array_equal(other, expected(["from another loop"]))
    np.testing.assert_array_equal(await queue.embed(["from this loop"]), expected(["from this loop"]))
    await queue.aclose()


async def test_make_embedder_shares_one_model_and_queue_per_process_until_the_last_handle_closes():
    # settings of its own: no other test's handle on the same queue
    settings = Settings(embedding=EmbeddingSettings(provider="stub", cache_enabled=False, queue_max_pending=777))
    before = shared_count()
    index, topics, recall = make_embedder(settings), make_embedder(settings), make_embedder(settings)
    assert shared_count() == before + 1
    assert index.inner.queue is topics.inner.queue is recall.inner.queue
    vectors = await asyncio.gather(index.embed_documents(["same"]), topics.embed_documents(["same"]),
                                   recall.embed_query("same"))
    np.testing.assert_array_equal(vectors[0], vectors[1])
    np.testing.assert_array_equal(vectors[0][0], vectors[2])
    await index.aclose()
    await topics.aclose()
    np.testing.assert_array_equal(await recall.embed_documents(["still open"]),
                                  StubEmbedder(384).embed_sync(["still open"]))
    queue = recall.inner.queue
    await recall.aclose()
    assert shared_count() == before and not queue._thread.is_alive()
    fresh = make_embedder(settings)  # a new one after the last closed
    assert fresh.inner.queue is not queue
    await fresh.aclose()


async def test_an_urgent_request_is_not_lingered_for_and_wakes_a_lingering_model():
    # An hour's linger: a request that waited for company would not be answered within the 10 s.
    model = GatedModel(hold_first=False)
    queue = EmbeddingQueue(model, 8, batch_size=32, linger_s=3600)
    first = await asyncio.wait_for(queue.embed(["a question"], urgent=True), 10)
    np.testing.assert_array_equal(first, expected(["a question"]))
    background = asyncio.ensure_future(queue.embed(["a message"]))  # lingered for, until...
    await until(lambda: queue.pending == 1)
    answer = await asyncio.wait_for(queue.embed(["another question"], urgent=True), 10)  # ...a query comes
    np.testing.assert_array_equal(answer, expected(["another question"]))
    np.testing.assert_array_equal(await asyncio.wait_for(background, 10), expected(["a message"]))
    assert model.calls == [["a question"], ["a message", "another question"]]  # still batched together
    await queue.aclose()

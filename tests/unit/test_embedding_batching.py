"""Concurrent query embeddings share model calls; a lone one is not held back; errors reach every caller."""

import asyncio

import numpy as np
import pytest

from memory_agent.embeddings.batching import MicroBatcher


class SlowModel:
    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    async def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        await asyncio.sleep(0.05)
        if self.fail_on in texts:
            raise RuntimeError("model down")
        return np.array([[float(len(t))] for t in texts], dtype=np.float32)


async def test_queries_arriving_during_a_batch_go_together_in_the_next_one():
    model = SlowModel()
    batcher = MicroBatcher(model, max_batch=32)
    first = asyncio.create_task(batcher.embed("a"))
    await asyncio.sleep(0.01)  # the first batch (just "a") is running
    rest = [asyncio.create_task(batcher.embed("b" * n)) for n in range(1, 11)]
    vectors = await asyncio.gather(first, *rest)
    assert model.calls == [["a"], ["b" * n for n in range(1, 11)]]
    assert [float(v[0]) for v in vectors] == [1.0] + [float(n) for n in range(1, 11)]


async def test_batches_are_capped_and_errors_reach_every_caller_of_their_batch():
    model = SlowModel(fail_on="bad")
    batcher = MicroBatcher(model, max_batch=2)
    results = await asyncio.gather(*(batcher.embed(t) for t in ["x", "bad", "yy", "zzz"]), return_exceptions=True)
    assert model.calls == [["x", "bad"], ["yy", "zzz"]]
    assert isinstance(results[0], RuntimeError) and isinstance(results[1], RuntimeError)
    assert [float(r[0]) for r in results[2:]] == [2.0, 3.0]


async def test_a_cancelled_caller_does_not_break_the_others():
    model = SlowModel()
    batcher = MicroBatcher(model)
    blocker = asyncio.create_task(batcher.embed("first"))
    await asyncio.sleep(0.01)
    gone = asyncio.create_task(batcher.embed("gone"))
    kept = asyncio.create_task(batcher.embed("kept"))
    await asyncio.sleep(0)
    gone.cancel()
    await blocker
    assert float((await kept)[0]) == 4.0
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert model.calls == [["first"], ["kept"]]

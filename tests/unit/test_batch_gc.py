"""The batch replay raises the cyclic collector's thresholds while it runs and restores them."""

from __future__ import annotations

import gc

import pytest

from memory_agent.batch_replay import fewer_collections


def test_the_thresholds_are_raised_while_the_batch_runs_and_restored_after_even_on_error():
    before = gc.get_threshold()
    with fewer_collections((123_456, 7, 8)):
        assert gc.get_threshold() == (123_456, 7, 8)
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), fewer_collections((99_999, 7, 8)):
        raise RuntimeError("the batch failed")
    assert gc.get_threshold() == before

"""api/collector.py: the API process's collector is settled once, at start."""

import gc

from api import collector


def test_settling_freezes_what_is_alive_once_and_makes_young_collections_rarer(monkeypatch):
    before = gc.get_threshold()
    monkeypatch.setattr(collector, "_settled", False)
    try:
        collector.settle()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert gc.get_threshold() == (collector.GEN0_THRESHOLD, before[1], before[2])
        kept = [object() for _ in range(3)]  # made after: not frozen by a second call
        gc.set_threshold(*before)
        collector.settle()
        assert gc.get_freeze_count() == frozen and gc.get_threshold() == before and kept
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)

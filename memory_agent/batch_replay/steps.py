"""Seconds per step of a batch's waves, summed (the worker log shows them)."""

from __future__ import annotations

import time


def add_seconds(seconds: dict[str, float], step: str, since: float) -> float:
    """Add the time since `since` to `step`; returns now, the next step's start."""
    now = time.perf_counter()
    seconds[step] = round(seconds.get(step, 0.0) + now - since, 3)
    return now

"""The API process's cyclic garbage collector, set once the app has started (docs/retrieval.md,
"Tenth round").

Under 32 clients on long conversations the collector took ~1.1 s of the API's CPU in a ~35 s
load pass, most of it full collections (~75 ms each, every ~3.5 s, over ~138,000 tracked
objects): concurrent requests keep their objects alive across young collections, so many reach
the oldest generation and make it collect often. What the process made while starting lives as
long as the process: it is moved where the collector no longer scans it (`gc.freeze`), and a
young collection runs every `GEN0_THRESHOLD` allocations instead of 700, so most of a request's
objects are freed by reference counting before a collection sees them. Reference cycles are
still collected; frozen objects are only those alive at start."""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 10_000
_settled = False


def settle() -> None:
    """Collect once, freeze what is alive (the modules, settings and app the process started
    with) and make young collections rarer; the older generations' thresholds are kept. Once a
    process: an app started again in the same process (tests) changes nothing."""
    global _settled
    if _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)

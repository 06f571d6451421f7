"""Short fetch waits while records flow, long ones while a consumer has nothing to do.

Every consumer keeps one fetch request in flight at the broker; with nothing to read the broker
answers it empty after `fetch_max_wait_ms` and the consumer sends the next at once. A worker runs
~14 consumers (the folds, every stage, every projector), so at the 50 ms wait that freshness needs
(aiokafka leaves a partition with buffered records out of the fetch in flight, so its next records
wait for that fetch: streams/kafka_transport.py) an idle worker sent ~280 fetches a second and
spent ~70-90 CPU-ms per second on them (docs/scaling.md). A consumer that has seen no record for
`idle_after_s` fetches with `idle_ms` instead; its first record still arrives at once (the broker
answers a waiting fetch as soon as anything arrives), and the first record it takes switches it
back to `busy_ms`. Cost: at the start of a burst, records on the very partition of the first one
can wait for the fetch in flight, up to `idle_ms`, once.

`busy_min_bytes` (the derived-event projectors, `projector_fetch_min_bytes`) lingers while busy:
the broker holds a fetch until that much arrived or `busy_ms` passed, so a projector applies a
batch per `busy_ms` rather than a transaction per record. While idle the fetch asks for 1 byte,
so a first record is not held back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class FetchPace:
    """Call `saw(got_records)` after every poll of `consumer` (an AIOKafkaConsumer)."""

    def __init__(self, consumer: Any, *, busy_ms: int, idle_ms: int, idle_after_s: float = 2.0,
                 busy_min_bytes: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        """`busy_min_bytes`: the fetch min bytes while records flow (the broker holds a fetch up to
        `busy_ms` for that much: a linger); while idle it is 1, so a first record comes at once."""
        self.consumer, self.busy_ms, self.idle_ms = consumer, busy_ms, max(busy_ms, idle_ms)
        self.busy_min_bytes = busy_min_bytes
        self.idle_after_s, self.clock = idle_after_s, clock
        self.last_record = clock()
        self.idle = False

    def saw(self, got_records: bool) -> None:
        now = self.clock()
        if got_records:
            self.last_record = now
            if self.idle:
                self.idle = False
                self._set(self.busy_ms, self.busy_min_bytes)
        elif not self.idle and now - self.last_record >= self.idle_after_s:
            self.idle = True
            self._set(self.idle_ms, 1)

    def _set(self, wait_ms: int, min_bytes: int) -> None:
        # aiokafka reads these attributes for every fetch request it builds (pinned in pyproject).
        fetcher = getattr(self.consumer, "_fetcher", None)
        if fetcher is not None:
            fetcher._fetch_max_wait_ms = wait_ms
            fetcher._fetch_min_bytes = min_bytes

"""faust's aiokafka transport with a configurable fetch wait.

faust creates its consumer with `fetch_max_wait_ms=1500` (not a setting). aiokafka leaves a
partition whose records are still buffered out of the next fetch request, so new records on
that partition can wait for the whole pending fetch: up to 1.5 s per hop, and a summary takes
three hops (message -> fold -> stage -> fold). The projectors already fetch with 100 ms.
Used through the `memkafka://` broker scheme that `make_app` sets.
"""

from __future__ import annotations

from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as faust_aiokafka

from projections.fetch_pace import FetchPace

SCHEME = "memkafka"
DEFAULT_FETCH_MAX_WAIT_MS = 1500  # faust's own value, when the app does not say


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        # aiokafka reads this attribute when it starts its fetcher (pinned in pyproject).
        consumer._fetch_max_wait_ms = getattr(self.app, "fetch_max_wait_ms", DEFAULT_FETCH_MAX_WAIT_MS)
        # Longer waits while nothing arrives (projections/fetch_pace.py).
        self._pace = FetchPace(consumer, busy_ms=consumer._fetch_max_wait_ms,
                               idle_ms=getattr(self.app, "idle_fetch_max_wait_ms", consumer._fetch_max_wait_ms))
        return consumer

    async def _fetch_records(self, consumer, active_partitions, timeout=None, max_records=None):
        records = await super()._fetch_records(consumer, active_partitions, timeout=timeout, max_records=max_records)
        pace = getattr(self, "_pace", None)
        if pace is not None and pace.consumer is consumer:
            pace.saw(bool(records))
        return records


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


TRANSPORTS.aliases.setdefault(SCHEME, f"{__name__}:Transport")

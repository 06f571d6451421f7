"""faust's aiokafka transport: a configurable fetch wait, and two holes closed for takeovers.

faust creates its consumer with `fetch_max_wait_ms=1500` (not a setting). aiokafka leaves a
partition whose records are still buffered out of the next fetch request, so new records on
that partition can wait for the whole pending fetch: up to 1.5 s per hop, and a summary takes
three hops (message -> fold -> stage -> fold). The projectors already fetch with 100 ms.

When a worker takes over partitions (a peer was SIGKILLed, tests/integration/test_two_workers.py):
- Seek: after a rebalance faust seeks every partition to its committed offset, but aiokafka
  does not move a partition without one, and records faust fetched but did not deliver during
  the rebalance were then skipped for good. A partition the dead peer had not committed yet lost
  its first records (a summary result: that conversation's window fold waited for it forever).
  `seek_to_committed_or_beginning` reads such a partition from its beginning.
- Flush: before committing offsets faust flushes the buffer its table changes (the folds'
  states) go through to their changelogs, but the flush returns once 100 ms pass without a
  record leaving the buffer: on the busy test machine it returned with 36 records still in it
  and the offsets were committed ahead of the state they had produced; a SIGKILL then would
  lose those changes while the partition's next owner starts after the events that made them.
  `_Producer.flush` empties the buffer first.

- Acks: a record fetched before a rebalance is never acknowledged (`_Consumer.ack`, `in_turn`).
- Put back: records a fetch took that faust would drop (the flow stopped by a rebalance, or
  their partition paused meanwhile) are sought back to (`put_back`): dropped, a changelog
  partition's restore never reached its end (the recovery stall, docs/backbone.md).
- Read offsets: faust drops a fetched record below the highest offset it has handed on of its
  partition (`Consumer._read_offset`), and counts a jump above it as a gap that is acknowledged
  (compacted topics). After a rebalance faust resumes the stream partitions before it seeks them
  to their committed offsets, so a fetch in between hands records on and raises that offset: the
  seek's records were then dropped as seen, and records that had not reached the processor
  with them were lost to it (a conversation stalled for good, docs/backbone.md "Records dropped
  as already read"). `StreamReadOffsets` forgets it for the stream partitions: every fetched
  record is delivered (the processor folds a record again without change) and no gap is acked.

Used through the `memkafka://` broker scheme that `make_app` sets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from aiokafka.errors import IllegalStateError
from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as faust_aiokafka

from runtime.fetch_pace import FetchPace

log = logging.getLogger(__name__)

SCHEME = "memkafka"
DEFAULT_FETCH_MAX_WAIT_MS = 1500  # faust's own value, when the app does not say


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        # aiokafka reads this attribute when it starts its fetcher (pinned in pyproject).
        consumer._fetch_max_wait_ms = getattr(self.app, "fetch_max_wait_ms", DEFAULT_FETCH_MAX_WAIT_MS)
        # Longer waits while nothing arrives (runtime/fetch_pace.py).
        self._pace = FetchPace(consumer, busy_ms=consumer._fetch_max_wait_ms,
                               idle_ms=getattr(self.app, "idle_fetch_max_wait_ms", consumer._fetch_max_wait_ms))
        return consumer

    async def _fetch_records(self, consumer, active_partitions, timeout=None, max_records=None):
        records = await super()._fetch_records(consumer, active_partitions, timeout=timeout, max_records=max_records)
        pace = getattr(self, "_pace", None)
        if pace is not None and pace.consumer is consumer:
            pace.saw(bool(records))
        dropped = undeliverable(self.consumer, active_partitions, records)
        if dropped:
            # faust would drop these records (`Consumer.getmany`), and aiokafka has moved past them.
            put_back(consumer, dropped)
            return {tp: batch for tp, batch in records.items() if tp not in dropped}
        return records

    async def seek_to_committed(self):
        """After a rebalance: every stream partition at its committed offset, or at its
        beginning when the group never committed one (aiokafka seeks only offsets > 0)."""
        consumer = self._ensure_consumer()
        return await self.call_thread(seek_to_committed_or_beginning, consumer, self.app.tables.changelog_topics)


class StreamReadOffsets(dict):
    """faust's `Consumer._read_offset` (the highest offset handed on, per partition) that answers
    None for every partition outside `changelog_topics()`: faust's fetch loop then delivers every
    record of a stream partition it fetches and never counts a jump as a gap to acknowledge.
    Changelog partitions keep faust's rule (their restore seeks them itself)."""

    def __init__(self, changelog_topics: Callable[[], Iterable[str]]) -> None:
        super().__init__()
        self._changelog_topics = changelog_topics

    def __missing__(self, tp):
        return None

    def __getitem__(self, tp):
        if tp.topic in self._changelog_topics():
            return dict.get(self, tp)
        return None


class _Consumer(faust_aiokafka.Consumer):
    def __post_init__(self) -> None:
        super().__post_init__()
        self._read_offset = StreamReadOffsets(lambda: self.app.tables.changelog_topics)

    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def ack(self, message) -> bool:
        """faust's ack, refused for a record that was not applied in turn (`in_turn`): fetched
        before the rebalance under way or the last one. faust acknowledges the records its reader
        skips during a rebalance ("ack the filtered message", `Stream._py_aiter`), and
        the batch taker (streams/take.py) the records of a batch the processor let go: acknowledged, a commit could
        pass them before they are folded again, and a crash then lost them. Refused, they stay
        uncommitted, and the seek to the committed offsets that ends the rebalance delivers them
        again (to this worker or to the partition's new owner)."""
        if not in_turn(self.app, message):
            return False
        return super().ack(message)


def in_turn(app, message) -> bool:
    """The record may be applied (and acknowledged) now: fetched in the consumer's current
    generation, and no rebalance has suspended the flow (faust suspends it when partitions are
    revoked and resumes it once the new assignment is being restored; a record of the current
    generation met while it is suspended is delivered again by the seek that ends the rebalance)."""
    return message.generation_id == app.consumer_generation_id and app.flow_control.is_active()


def undeliverable(consumer, active_partitions, records) -> dict:
    """The part of a fetch's `records` faust's `Consumer.getmany` would drop: all of them once
    the flow has stopped (a rebalance), else those of a partition out of the set it fetched for
    (aiokafka reads an empty set as every partition: a recovery that paused its last changelog
    partitions during the fetch got the standby partitions' records, dropped)."""
    if not consumer.flow_active:
        return dict(records)
    if active_partitions is None:
        return {}
    return {tp: batch for tp, batch in records.items()
            if tp not in active_partitions and tp not in consumer._buffered_partitions}


def put_back(consumer, records) -> None:
    """Seek every partition of `records` (fetched, never delivered) back to its first record.

    faust fetches with a one-second wait on its consumer thread and checks that the flow is
    active only before the wait. A rebalance shorter than that (a peer leaving) stops the flow,
    and the table recovery seeks a changelog partition to where its restore starts (0 for a
    partition newly active) and only then resumes the flow: a fetch still waiting from before
    the rebalance took that partition's records in between, faust's `getmany` found the flow
    stopped and dropped them ("Seek back to committed offsets" moves no changelog partition: the
    group commits none), and aiokafka's position stayed past them. The recovery then waited for
    a highwater it never reached: "No event received for active tp" for the partitions it had
    to restore, processing stalled (docs/backbone.md, "The recovery stall")."""
    for tp, batch in records.items():
        if batch:
            try:
                consumer.seek(tp, batch[0].offset)
            except IllegalStateError:
                pass  # no longer assigned: nothing to put back
    log.info("put back %d undelivered records of %s (the flow stopped or the partition paused)",
             sum(map(len, records.values())), sorted(f"{tp.topic}:{tp.partition}" for tp in records))


async def seek_to_committed_or_beginning(consumer, changelog_topics) -> dict:
    """aiokafka's `seek_to_committed`, plus a seek to the beginning for the stream partitions
    without a committed offset (`auto_offset_reset="earliest"` taken at its word).

    faust calls it once a rebalance's table recovery is done; records of a newly assigned
    partition fetched before that were not delivered (the flow is suspended). aiokafka does not
    move a partition that has no committed offset (or 0), so those records were skipped for
    good: a worker taking over partitions its SIGKILLed peer had not committed yet lost their
    first records, e.g. a summary result (tests/integration/test_two_workers.py). Changelog
    partitions are left alone: faust's recovery positions them itself."""
    committed = await consumer.seek_to_committed()
    fresh = [tp for tp, offset in committed.items()
             if (offset is None or offset <= 0) and tp.topic not in changelog_topics]
    if fresh:
        await consumer.seek_to_beginning(*fresh)
    # Where each stream partition resumes after the rebalance: what tells "committed past records
    # nobody folded" from "records dropped after the seek" (docs/backbone.md, 2026-11-28).
    log.info("stream partitions resume at their committed offsets %s; from their beginning: %s",
             sorted((f"{tp.topic}:{tp.partition}", offset) for tp, offset in committed.items()
                    if tp.topic not in changelog_topics and offset is not None and offset > 0),
             sorted(f"{tp.topic}:{tp.partition}" for tp in fresh))
    return committed


class _Producer(faust_aiokafka.Producer):
    async def flush(self) -> None:
        """Every buffered record handed to aiokafka, then aiokafka's flush: faust calls this
        before it commits offsets, so the changelog holds every change of the committed events."""
        await drain(self.buffer)
        await super().flush()


async def drain(buffer, warn_after_s: float = 10.0) -> None:
    """`buffer.flush()` until the buffer is empty (faust's gives up after 100 ms without a send).
    A broker outage keeps it waiting, and the commit with it: that is the point."""
    started = warned = time.monotonic()
    while buffer.size:
        await buffer.flush()
        now = time.monotonic()
        if buffer.size and now - warned >= warn_after_s:
            warned = now
            log.warning("%d records still wait in the producer buffer after %.0f s; offsets are committed"
                        " once they are sent", buffer.size, now - started)


class Transport(faust_aiokafka.Transport):
    Consumer = _Consumer
    Producer = _Producer


TRANSPORTS.aliases.setdefault(SCHEME, f"{__name__}:Transport")

"""Concurrent stages: requests on the memory topic in, results back to the same partition.

A stage (summaries, chunk extraction, topic embeddings, topic compaction) is the slow,
unordered half of a memory system: its ordered fold emits a request, the stage calls a
model and emits the result, and the fold sees the result in log order. Stages run here,
on plain aiokafka, not as faust agents:

- latency: faust's consumer delivered stage requests 270-330 ms (p50) after they were
  produced on this machine, while a plain aiokafka consumer sees them in ~3 ms; a summary
  pays that hop on its critical path (docs/summaries.md, "Benchmark").
- correctness: a faust agent with concurrency > 1 can commit past unfinished events
  (faust-streaming #606). Here a partition's committed offset never passes its oldest
  unfinished request (`OffsetTracker`), so a crash re-delivers exactly the unfinished ones
  and the stages' idempotence (settled checks, the LLM cache) makes that harmless.

All stages of a worker share one consumer (group `<app id>.stages`, `stages_group`): one
fetch loop reads the memory topic once, decodes each record once and queues it for the stages
of its type; each stage starts its requests in log order per partition, runs up to its own
concurrency, and a busy stage does not hold up the others. The committed offset of a partition
never passes a record some stage has not finished. Before, each stage had a consumer and group
of its own (five consumers fetching and decoding every memory event, docs/scaling.md "Where
the CPU goes"); `adopt_legacy_offsets` carries their committed positions over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    TopicPartition,
)
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from aiokafka.structs import ConsumerRecord

from core import metrics, telemetry
from core.llm import provenance as llm_provenance
from runtime import dead_letter
from runtime.dead_letter import DeadLetter
from runtime.fetch_pace import FetchPace
from runtime.isolation import describe, is_record_error
from runtime.outage import retry_transient
from schemas.codec import Event, encode_checked
from schemas.envelope import Envelope, InvalidEvent
from schemas.limits import DEFAULT_LIMITS, DEFAULT_MAX_DEAD_LETTER_BYTES, Limits, scrub_text

log = logging.getLogger(__name__)

Handler = Callable[[list[Event]], Awaitable[list[Envelope]]]
T = TypeVar("T")


@dataclass
class Stage:
    """What one stage answers: `handle` gets up to `batch_size` requests of the `wanted`
    types and returns the result events (each is sent keyed by its conversation)."""

    name: str
    wanted: frozenset[str]
    handle: Handler
    concurrency: int = 1
    batch_size: int = 1
    # An unexpected exception is retried this often (with backoff) before the batch is
    # dropped with an error log; the fold's stuck-request timer re-issues it later.
    max_attempts: int = 3
    retry_backoff_s: float = 1.0


class Lazy(Generic[T]):
    """Built on first use, once, however many requests arrive together (pools, models)."""

    def __init__(self, build: Callable[[], Awaitable[T]]) -> None:
        self._build = build
        self._value: T | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> T:
        if self._value is None:
            async with self._lock:
                if self._value is None:
                    self._value = await self._build()
        return self._value


def one_by_one(handle_one: Callable[[Event], Awaitable[Envelope | None]]) -> Handler:
    """A Handler from a stage that answers one request with at most one result."""
    async def handle(events: list[Event]) -> list[Envelope]:
        results = [await handle_one(event) for event in events]
        return [result for result in results if result is not None]
    return handle


@dataclass
class OffsetTracker:
    """Per partition: offsets seen, requests still in flight, and the safe commit position.

    A record several stages want is started once per stage and done when every one of them
    has finished it (`_pending` counts the stages still working on an offset)."""

    _next: dict[TopicPartition, int] = field(default_factory=dict)
    _pending: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
    _committed: dict[TopicPartition, int] = field(default_factory=dict)

    def seen(self, tp: TopicPartition, offset: int) -> None:
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def started(self, tp: TopicPartition, offset: int) -> None:
        self.seen(tp, offset)
        pending = self._pending.setdefault(tp, {})
        pending[offset] = pending.get(offset, 0) + 1

    def finished(self, tp: TopicPartition, offset: int) -> None:
        pending = self._pending.get(tp, {})
        left = pending.get(offset, 0) - 1
        if left > 0:
            pending[offset] = left
        else:
            pending.pop(offset, None)

    def in_flight(self, tps: Iterable[TopicPartition] | None = None) -> int:
        """Offsets not finished by every stage they are for."""
        chosen = self._pending if tps is None else {tp: self._pending.get(tp, {}) for tp in tps}
        return sum(len(offsets) for offsets in chosen.values())

    def position(self, tp: TopicPartition) -> int | None:
        """Everything before it is done: the oldest unfinished offset, else the next unseen."""
        pending = self._pending.get(tp)
        if pending:
            return min(pending)
        return self._next.get(tp)

    def to_commit(self) -> dict[TopicPartition, int]:
        """Positions that moved since the last `committed` call."""
        out = {}
        for tp in self._next:
            position = self.position(tp)
            if position is not None and position > self._committed.get(tp, -1):
                out[tp] = position
        return out

    def committed(self, positions: dict[TopicPartition, int]) -> None:
        self._committed.update(positions)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._next.pop(tp, None)
            self._pending.pop(tp, None)
            self._committed.pop(tp, None)


def batches(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


Batch = list[tuple[ConsumerRecord, Event]]


class _Lane:
    """One stage inside the shared runner: its queue of batches (fetch order), its slots."""

    def __init__(self, stage: Stage, max_queued: int) -> None:
        self.stage, self.max_queued = stage, max_queued
        self.queue: deque[tuple[TopicPartition, Batch]] = deque()
        self.queued = 0  # records in `queue`
        self.ready = asyncio.Event()
        self.slots = asyncio.Semaphore(stage.concurrency)
        self.in_flight_gauge = metrics.STAGE_IN_FLIGHT.labels(stage=stage.name)
        self.errors = metrics.STAGE_ERRORS.labels(stage=stage.name)

    def put(self, tp: TopicPartition, batch: Batch) -> None:
        self.queue.append((tp, batch))
        self.queued += len(batch)
        self.ready.set()

    def take(self) -> tuple[TopicPartition, Batch]:
        tp, batch = self.queue.popleft()
        self.queued -= len(batch)
        return tp, batch

    def drop(self, tps: set[TopicPartition]) -> None:
        """Batches of partitions that moved away, not started: their next owner runs them."""
        kept = deque(item for item in self.queue if item[0] not in tps)
        self.queue, self.queued = kept, sum(len(batch) for _, batch in kept)

    @property
    def full(self) -> bool:
        return self.queued >= self.max_queued


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, runner: StageRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked) -> None:
        await self.runner.settle(set(revoked))

    async def on_partitions_assigned(self, assigned) -> None:
        return None


class StageRunner:
    """Consumes `topic` in one group for all `stages`: one fetch, each record to the stages of
    its type, each stage concurrent up to its own slots, commits safely.

    A stage whose slots are all busy queues its batches (in fetch order, so each stage starts a
    partition's requests in log order as before) and does not hold up the others; only when
    one stage has `max_queued` records waiting does the runner stop fetching until it has room
    (memory stays bounded; a fetch of 500 records goes over the bound at most once)."""

    def __init__(
        self, stages: Stage | Sequence[Stage], *, topic: str, group_id: str, bootstrap_servers: str,
        decode_if: Callable[..., Event | None], fetch_max_wait_ms: int = 50,
        commit_interval_s: float = 0.5, settle_timeout_s: float = 30.0, session_timeout_s: float = 10.0,
        dead_letter_topic: str | None = None, max_dead_letter_bytes: int = DEFAULT_MAX_DEAD_LETTER_BYTES,
        limits: Limits = DEFAULT_LIMITS, idle_fetch_max_wait_ms: int | None = None,
        legacy_groups: Sequence[str] = (), max_queued: int = 2000,
    ) -> None:
        """`decode_if(value, types, key=key)`: the event, or None (skipped) for other types,
        invalid records and keys that are not the event's conversation. `legacy_groups`: the
        groups these stages committed in before they shared one (see `adopt_legacy_offsets`)."""
        self.stages = [stages] if isinstance(stages, Stage) else list(stages)
        names = [stage.name for stage in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique in a runner: {names}")
        self.name = "+".join(names)
        self.topic, self.group_id = topic, group_id
        self.legacy_groups = list(legacy_groups)
        self.dead_letter_topic, self.max_dead_letter_bytes = dead_letter_topic, max_dead_letter_bytes
        self.limits = limits
        self.bootstrap_servers, self.decode_if = bootstrap_servers, decode_if
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.idle_fetch_max_wait_ms = idle_fetch_max_wait_ms or fetch_max_wait_ms  # runtime/fetch_pace.py
        self.commit_interval_s, self.settle_timeout_s = commit_interval_s, settle_timeout_s
        self.session_timeout_s = session_timeout_s
        self.offsets = OffsetTracker()
        self.lanes = [_Lane(stage, max(max_queued, stage.batch_size)) for stage in self.stages]
        self._by_type: dict[str, list[_Lane]] = {}
        for lane in self.lanes:
            for kind in lane.stage.wanted:
                self._by_type.setdefault(kind, []).append(lane)
        self.wanted = frozenset(self._by_type)
        self._room = asyncio.Event()
        self._tasks: dict[asyncio.Task, TopicPartition] = {}
        self._fatal: BaseException | None = None
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None

    @property
    def stage(self) -> Stage:
        """The only stage of a one-stage runner."""
        (stage,) = self.stages
        return stage

    async def run(self) -> None:
        """Until cancelled: unfinished requests stay uncommitted and come back after a restart."""
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=1,
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, group_id=self.group_id, enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_wait_ms=self.fetch_max_wait_ms, max_poll_records=500,
            # A full stage means no poll: allow the slowest LLM call with its retries (4 x 60 s + backoff).
            max_poll_interval_ms=15 * 60 * 1000,
            session_timeout_ms=int(self.session_timeout_s * 1000),
        )
        await self.adopt_legacy_offsets()
        self.consumer.subscribe([self.topic], listener=_Rebalance(self))
        pace = FetchPace(self.consumer, busy_ms=self.fetch_max_wait_ms, idle_ms=self.idle_fetch_max_wait_ms)
        await self.producer.start()
        try:
            await self.consumer.start()
            feeders = [asyncio.create_task(self._feed(lane), name=f"stage-feed-{lane.stage.name}")
                       for lane in self.lanes]
            try:
                await self._consume(pace)
            finally:
                for feeder in feeders:
                    feeder.cancel()
                await asyncio.gather(*feeders, return_exceptions=True)
                await self._shutdown()
        finally:
            await self.producer.stop()

    async def _consume(self, pace: FetchPace) -> None:
        loop = asyncio.get_running_loop()
        next_commit = loop.time() + self.commit_interval_s
        while True:
            self._raise_fatal()
            if any(lane.full for lane in self.lanes):  # wait for room, committing meanwhile
                self._room.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._room.wait(), self.commit_interval_s)
            else:
                fetched = await self._fetch()
                pace.saw(any(fetched.values()))
                for tp, records in fetched.items():
                    self._dispatch(tp, records)
            if loop.time() >= next_commit:
                await self.commit()
                next_commit = loop.time() + self.commit_interval_s

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise RuntimeError(f"stages {self.name} could not send their results") from self._fatal

    def _dispatch(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        """Each record decoded once, queued for every stage of its type; the others are only seen."""
        chosen: dict[int, Batch] = {}
        for record in records:
            event = self.decode_if(record.value, self.wanted, key=record.key)
            lanes = self._by_type.get(event.type, ()) if event is not None else ()
            if not lanes:
                self.offsets.seen(tp, record.offset)
                continue
            for index, lane in enumerate(self.lanes):
                if lane in lanes:
                    self.offsets.started(tp, record.offset)
                    chosen.setdefault(index, []).append((record, event))
        for index, picked in chosen.items():
            lane = self.lanes[index]
            for batch in batches(picked, lane.stage.batch_size):
                lane.put(tp, batch)

    async def _feed(self, lane: _Lane) -> None:
        """A stage's queued batches into tasks, in order, as its slots allow."""
        while True:
            if not lane.queue:
                lane.ready.clear()
                await lane.ready.wait()
                continue
            await lane.slots.acquire()
            if not lane.queue:  # dropped by a revocation while waiting for the slot
                lane.slots.release()
                continue
            tp, batch = lane.take()
            self._room.set()
            task = asyncio.create_task(self._process(lane, tp, batch), name=f"stage-{lane.stage.name}")
            self._tasks[task] = tp
            task.add_done_callback(self._tasks.pop)

    async def _process(self, lane: _Lane, tp: TopicPartition, batch: Batch) -> None:
        with telemetry.batch_span(f"stage {lane.stage.name}", [record for record, _ in batch]):
            await self._process_batch(lane, tp, batch)

    async def _process_batch(self, lane: _Lane, tp: TopicPartition, batch: Batch) -> None:
        stage = lane.stage
        lane.in_flight_gauge.inc()
        try:
            events = [event for _, event in batch]
            for attempt in range(1, stage.max_attempts + 1):
                try:
                    with llm_provenance.serving(events):  # LLM-cache entries record these requests
                        results = await self.handle_through_outages(stage, events, tp)
                    break
                except Exception as exc:  # a bug or an outage the handler did not turn into a result
                    lane.errors.inc()
                    if attempt == stage.max_attempts:
                        log.exception("stage %s dropped %d request(s) of %s after %d attempts; the fold's"
                                      " timer re-issues them", stage.name, len(events), tp, attempt)
                        if is_record_error(exc):  # the requests' fault: keep them where they can be seen
                            await self._refuse(stage, [record for record, _ in batch], "apply_failed", describe(exc))
                        results = []
                        break
                    log.warning("stage %s failed on %s (attempt %d), retrying", stage.name, tp, attempt,
                                exc_info=True)
                    await asyncio.sleep(stage.retry_backoff_s * 2 ** (attempt - 1))
            try:
                await self.send_through_outages(stage, results, tp)
            except MessageSizeTooLargeError as exc:  # the requests' fault, not the broker's
                await self._refuse(stage, [record for record, _ in batch], "result_too_large", describe(exc))
            except InvalidEvent as exc:  # an answer no consumer could store
                reason = "result_too_large" if exc.reason == "oversized" else "result_invalid"
                await self._refuse(stage, [record for record, _ in batch], reason, describe(exc))
            except KafkaError as exc:  # refused for good (not an outage): stop, nothing is committed
                self._fatal = exc
                self._room.set()
                return
            for record, _ in batch:
                self.offsets.finished(tp, record.offset)
        finally:
            lane.in_flight_gauge.dec()
            lane.slots.release()

    def _checked(self, stage: Stage, envelope: Envelope) -> bytes:
        try:
            return encode_checked(envelope, self.limits)
        except InvalidEvent as exc:
            if exc.reason != "invalid_text":
                raise
            log.warning("stage %s: dropped NUL or lone surrogates from a %s (%s)", stage.name, envelope.type,
                        exc.detail)
            return encode_checked(envelope.model_copy(update={"payload": scrub_text(envelope.payload)}), self.limits)

    async def _refuse(self, stage: Stage, records: list[ConsumerRecord], reason: str, detail: str) -> None:
        """Dead-letter requests this stage cannot answer, so they do not come back forever."""
        if self.dead_letter_topic is None:
            log.error("stage %s refused %d request(s) (%s) and has no dead-letter topic", stage.name,
                      len(records), detail)
            return
        letters = [DeadLetter(record, reason, detail) for record in records]
        await dead_letter.publish(self.producer, self.dead_letter_topic, letters, stage=f"stage.{stage.name}",
                                  max_bytes=self.max_dead_letter_bytes)
        metrics.DEAD_LETTERS.labels(stage=stage.name, reason=reason).inc(len(letters))

    # --- outages: PostgreSQL or Kafka down means wait and retry, never an exit ---------------

    async def handle_through_outages(self, stage: Stage, events: list[Event], tp: TopicPartition) -> list[Envelope]:
        """`stage.handle`, repeated while PostgreSQL or the broker is away (not counted as one
        of the stage's attempts: those are for failures a retry might not fix)."""
        return await retry_transient(lambda: stage.handle(events), what=f"stage {stage.name} on {tp}")

    async def send_through_outages(self, stage: Stage, results: list[Envelope], tp: TopicPartition) -> None:
        """Results to the memory topic, checked as every consumer will check them (a model's NUL
        is dropped; another broken rule raises InvalidEvent, a result too large for a record
        MessageSizeTooLargeError, before anything of the batch is sent), re-sent until the
        broker takes them. A repeat is harmless: the folds ignore a result they have already seen."""
        values = [(e.key, self._checked(stage, e)) for e in results]  # InvalidEvent before anything is sent

        async def send() -> None:
            sent = [await self.producer.send(self.topic, key=key, value=value, headers=telemetry.headers())
                    for key, value in values]
            await asyncio.gather(*sent)
        if values:
            await retry_transient(send, what=f"stage {stage.name} results for {tp}")

    async def _fetch(self) -> dict:
        """The next records; an unreachable broker is waited out (aiokafka reconnects itself)."""
        return await retry_transient(
            lambda: self.consumer.getmany(timeout_ms=200), what=f"stages {self.name} fetch"
        )

    async def commit(self) -> None:
        positions = self.offsets.to_commit()
        if not positions:
            return
        try:
            await self.consumer.commit(positions)
            self.offsets.committed(positions)
        except KafkaError as exc:  # a rebalance in progress: the next round commits
            log.debug("stages %s commit skipped: %s", self.name, exc)

    async def settle(self, tps: set[TopicPartition]) -> None:
        """Before partitions move: drop their queued batches, let their running requests finish
        (bounded), commit, forget them."""
        for lane in self.lanes:
            lane.drop(tps)
        self._room.set()
        waiting = [task for task, tp in self._tasks.items() if tp in tps]
        if waiting:
            await asyncio.wait(waiting, timeout=self.settle_timeout_s)
        positions = {tp: p for tp, p in self.offsets.to_commit().items() if tp in tps}
        if positions:
            try:
                await self.consumer.commit(positions)
            except KafkaError as exc:
                log.warning("stages %s could not commit revoked partitions: %s", self.name, exc)
        self.offsets.forget(tps)

    async def adopt_legacy_offsets(self) -> None:
        """Partitions this group never committed start where every legacy group is done.

        Before they shared a runner each stage had its own group (`stage_group(settings, name)`),
        and the batch replay still hands over by committing those groups. A position is safe for
        the shared group when every stage is done before it: the smallest of the legacy groups'
        offsets, and only when each of them has one (a stage that never committed would have read
        from the beginning, so the shared group does). Committed for the group before this runner
        joins it (a seek on assignment would race aiokafka's own reset); when the group already
        has members, they did it when they started. Anything unclear: the beginning, which re-runs
        requests the stages' idempotence absorbs."""
        if not self.legacy_groups:
            return
        seeds: dict[TopicPartition, int] = {}
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        try:
            await admin.start()
            try:
                (described,) = await admin.describe_topics([self.topic])
                tps = [TopicPartition(self.topic, p["partition"]) for p in described["partitions"]]
                own = await admin.list_consumer_group_offsets(self.group_id, partitions=tps)
                fresh = [tp for tp in tps if tp not in own or own[tp].offset < 0]
                legacy = [await admin.list_consumer_group_offsets(group, partitions=fresh)
                          for group in self.legacy_groups] if fresh else []
            finally:
                await admin.close()
            for tp in fresh:
                offsets = [found[tp].offset for found in legacy if tp in found and found[tp].offset >= 0]
                if len(offsets) == len(self.legacy_groups):
                    seeds[tp] = min(offsets)
            if not seeds:
                return
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, group_id=self.group_id,
                                        enable_auto_commit=False)
            await consumer.start()
            try:
                consumer.assign(list(seeds))
                await consumer.commit(seeds)
            finally:
                await consumer.stop()
            log.info("stages %s: took over the per-stage groups' positions %s", self.name,
                     {tp.partition: offset for tp, offset in seeds.items()})
        except (KafkaError, KeyError, ValueError):
            log.warning("stages %s: the per-stage groups' positions not taken over; partitions without a"
                        " committed offset start at the beginning", self.name, exc_info=True)

    async def _shutdown(self) -> None:
        """Cancelled: unfinished requests are abandoned uncommitted; finished ones are committed."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.commit()
        await self.consumer.stop()


async def run_stages(runners: list[StageRunner]) -> None:
    """Every stage runner of the worker until cancelled; one failing runner stops the worker."""
    if not runners:
        return
    tasks = [asyncio.create_task(r.run(), name=f"stage-runner-{r.name}") for r in runners]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

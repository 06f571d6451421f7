"""Runs projectors: Kafka batches -> one Postgres transaction per projector with rows + offsets.

Every projector runs in a `ProjectorGroup` (of one, when it keeps a consumer of its own): one
fetch of the union of their topics, then the group's projectors apply the batch (each the records
of its own topics) in one transaction with every projector's stored offsets (each in a transaction
of its own when that fails). Sharing changes who fetches, not what is applied: a partition is read
from the lowest position any of its readers stored, and each skips what it applied already
(`applied_up_to`), so exactly-once projection holds per projector."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import psycopg
from aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    TopicPartition,
)
from aiokafka.structs import ConsumerRecord

from core import metrics, telemetry
from core.settings import Settings
from projections import time_order
from runtime import dead_letter, isolation
from runtime.db import connect
from runtime.dead_letter import DeadLetter
from runtime.fetch_pace import FetchPace
from runtime.outage import retry_transient

log = logging.getLogger(__name__)

KAFKA_COMMIT_INTERVAL_S = 1.0


class Projector(Protocol):
    """Applies a batch inside an open transaction; returns the records it refused."""

    name: str

    def topics(self, settings: Settings) -> list[str]: ...

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]: ...

    # Optional: `shares_transaction(records) -> bool`, False when these records must be applied
    # in a transaction of the projector's own (an erasure's table locks); absent means True.


def shares_transaction(projector: Projector, records: Sequence[ConsumerRecord]) -> bool:
    check = getattr(projector, "shares_transaction", None)
    return True if check is None else check(records)


async def load_offsets(conn: psycopg.AsyncConnection, projector: str) -> dict[TopicPartition, int]:
    rows = await conn.execute(
        "SELECT topic, partition, next_offset FROM projector_offsets WHERE projector = %s", (projector,)
    )
    return {TopicPartition(t, p): o for t, p, o in await rows.fetchall()}


async def save_offsets(conn: psycopg.AsyncConnection, projector: str, records: Sequence[ConsumerRecord]) -> None:
    await save_positions(conn, projector, next_positions(records))


async def save_positions(conn: psycopg.AsyncConnection, projector: str, positions: dict[TopicPartition, int]) -> None:
    """Next offset to read per partition; a position never moves back."""
    await save_all_positions(conn, {projector: positions})


async def save_all_positions(conn: psycopg.AsyncConnection, by_projector: dict[str, dict[TopicPartition, int]]) -> None:
    """`save_positions` of several projectors in one statement (executemany would open a
    pipeline and send one per partition)."""
    rows = [(name, tp.topic, tp.partition, offset)
            for name, positions in by_projector.items() for tp, offset in positions.items()]
    if not rows:
        return
    names, topics, partitions, offsets = (list(column) for column in zip(*rows))
    await conn.execute(
        "INSERT INTO projector_offsets (projector, topic, partition, next_offset)"
        " SELECT n, t, p, o FROM unnest(%s::text[], %s::text[], %s::int[], %s::bigint[]) AS u(n, t, p, o)"
        " ON CONFLICT (projector, topic, partition) DO UPDATE SET"
        " next_offset = GREATEST(projector_offsets.next_offset, EXCLUDED.next_offset), updated_at = now()",
        (names, topics, partitions, offsets),
    )


def next_positions(records: Sequence[ConsumerRecord]) -> dict[TopicPartition, int]:
    """The next offset to read per partition after these records."""
    highest: dict[TopicPartition, int] = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        highest[tp] = max(highest.get(tp, -1), r.offset + 1)
    return highest


async def apply_records(
    conn: psycopg.AsyncConnection, producer: AIOKafkaProducer, settings: Settings, projector: Projector,
    records: Sequence[ConsumerRecord], apply: Callable[[], Awaitable[list[DeadLetter]]] | None = None,
) -> None:
    """One projector batch in one transaction: rows, dead letters of refused records, offsets.
    `apply` replaces `projector.apply(conn, records)` (for a caller that decoded them already).
    A record the database refuses is found and dead-lettered; the others are applied
    (runtime/isolation.py)."""
    try:
        await apply_batch(conn, producer, settings, projector, records, apply)
    except Exception as exc:  # noqa: BLE001 - sorted into the record's fault or not
        if not isolation.is_record_error(exc):
            raise
        log.warning("%s: a batch of %d failed (%s); isolating the record", projector.name, len(records),
                    isolation.describe(exc))
        await isolation.isolate(
            records, exc, lambda part: apply_batch(conn, producer, settings, projector, part),
            lambda record, error: refuse_record(conn, producer, settings, projector, record, error),
        )


async def apply_batch(
    conn: psycopg.AsyncConnection, producer: AIOKafkaProducer, settings: Settings, projector: Projector,
    records: Sequence[ConsumerRecord], apply: Callable[[], Awaitable[list[DeadLetter]]] | None = None,
) -> None:
    name = projector.name
    async with conn.transaction():
        with telemetry.batch_span(f"project {name}", records):
            letters = await (apply() if apply is not None else projector.apply(conn, records))
        if letters:
            await publish_letters(producer, settings, name, letters)
        await save_offsets(conn, name, records)
    metrics.PROJECTED.labels(projector=name).inc(len(records))
    metrics.PROJECTOR_TRANSACTIONS.labels(projectors=name).inc()


async def _traced_apply(projector: Projector, conn: psycopg.AsyncConnection,
                        records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
    with telemetry.batch_span(f"project {projector.name}", records):
        return await projector.apply(conn, records)


async def refuse_record(
    conn: psycopg.AsyncConnection, producer: AIOKafkaProducer, settings: Settings, projector: Projector,
    record: ConsumerRecord, error: BaseException,
) -> None:
    """The record could not be applied: its dead letter and its offset, in one transaction."""
    async with conn.transaction():
        letter = DeadLetter(record, "apply_failed", isolation.describe(error))
        await publish_letters(producer, settings, projector.name, [letter])
        await save_offsets(conn, projector.name, [record])
    metrics.PROJECTOR_TRANSACTIONS.labels(projectors=projector.name).inc()


async def publish_letters(producer: AIOKafkaProducer, settings: Settings, name: str, letters: list[DeadLetter]) -> None:
    await dead_letter.publish(producer, settings.kafka.dead_letter_topic, letters, stage=f"projector.{name}",
                              max_bytes=settings.kafka.max_dead_letter_bytes)
    for letter in letters:
        metrics.DEAD_LETTERS.labels(stage=name, reason=letter.reason).inc()


def projector_consumer(settings: Settings, group_id: str, *, fetch_min_bytes: int = 1) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        fetch_min_bytes=fetch_min_bytes,
        bootstrap_servers=settings.kafka.bootstrap_servers,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        # Freshness: answer a fetch as soon as anything arrives, or after this long.
        fetch_max_wait_ms=settings.kafka.fetch_max_wait_ms,
        session_timeout_ms=int(settings.kafka.session_timeout_s * 1000),
    )


class ProjectorRunner:
    """One projector: its connection, dead-letter producer and applied positions. The consumer
    belongs to a `ProjectorGroup` (of one, for `run()`)."""

    def __init__(self, settings: Settings, projector: Projector, *, max_batch: int = 2000) -> None:
        self.settings = settings
        self.projector = projector
        self.max_batch = max_batch
        self.group_id = f"{settings.kafka.topic_prefix}.{settings.generation}.projector.{projector.name}"
        self.topics = frozenset(projector.topics(settings))  # of its group's records, only these
        self.producer: AIOKafkaProducer | None = None
        self.conn: psycopg.AsyncConnection | None = None
        self.ready = asyncio.Event()
        # Next offset already applied per partition: a redelivered record is skipped whole,
        # so it cannot be dead-lettered twice either.
        self.applied_up_to: dict[TopicPartition, int] = {}

    async def open(self) -> None:
        """The connection and the dead-letter producer."""
        self.conn = await retry_transient(
            lambda: connect(self.settings), what=f"projector {self.projector.name} connect"
        )
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka.bootstrap_servers, enable_idempotence=True, acks="all"
        )
        await self.producer.start()

    async def stop(self) -> None:
        if self.producer is not None:
            try:
                await self.producer.stop()
            except Exception:  # noqa: BLE001 - best effort on shutdown
                log.exception("error while stopping %s", self.projector.name)
        if self.conn is not None:
            await self.conn.close()

    async def run(self) -> None:
        """Consume forever on a consumer of its own (a group of one); each batch commits rows and
        offsets together."""
        await ProjectorGroup(self.settings, [self.projector], runners=[self]).run()

    def fresh(self, records: Sequence[ConsumerRecord]) -> list[ConsumerRecord]:
        """The records of its topics this projector has not applied yet."""
        applied, topics = self.applied_up_to, self.topics
        return [r for r in records
                if r.topic in topics and r.offset >= applied.get(TopicPartition(r.topic, r.partition), 0)]

    async def process(self, records: Sequence[ConsumerRecord]) -> None:
        """The records not applied yet, in a transaction of this projector's own."""
        fresh = self.fresh(records)
        if fresh:
            await self.apply_through_outages(fresh)
            self.applied(fresh)

    def applied(self, records: Sequence[ConsumerRecord]) -> None:
        for r in records:
            self.applied_up_to[TopicPartition(r.topic, r.partition)] = r.offset + 1

    # --- outages: PostgreSQL or Kafka down (retry the same batch), never a per-record failure ---

    async def apply_through_outages(self, records: list[ConsumerRecord]) -> None:
        """`apply_records` until it succeeds; while PostgreSQL (or the dead-letter producer's
        broker) is away the batch waits, then runs again on a new connection. Its rows and
        offsets commit in one transaction, so a batch cut off by the outage left nothing."""
        await retry_transient(
            lambda: apply_records(self.conn, self.producer, self.settings, self.projector, records),
            what=f"projector {self.projector.name}", before_retry=self.reconnect,
        )

    async def reconnect(self) -> None:
        """A fresh connection when the current one is closed or broken (raises while PG is down)."""
        if self.conn is not None and not self.conn.closed and not self.conn.broken:
            return
        if self.conn is not None:
            try:
                await self.conn.close()
            except Exception:  # noqa: BLE001 - it is broken already
                pass
        self.conn = await connect(self.settings)

    async def stored_offsets(self) -> dict[TopicPartition, int]:
        """The positions stored with the rows, waiting out a PostgreSQL outage."""
        async def load() -> dict[TopicPartition, int]:
            async with await connect(self.settings) as conn:
                return await load_offsets(conn, self.projector.name)
        return await retry_transient(load, what=f"projector {self.projector.name} offsets")


class _SeekShared(ConsumerRebalanceListener):
    """The group's consumer resumes each partition at the lowest offset its projectors stored."""

    def __init__(self, group: "ProjectorGroup") -> None:
        self.group = group

    async def on_partitions_revoked(self, revoked) -> None:
        # Let the batch in flight commit (every projector's transaction) before the partitions move.
        async with self.group.lock:
            return None

    async def on_partitions_assigned(self, assigned) -> None:
        async with self.group.lock:
            stored_by_runner = [await runner.stored_offsets() for runner in self.group.runners]
            lowest: dict[TopicPartition, int | None] = {}
            for runner, stored in zip(self.group.runners, stored_by_runner):
                runner.applied_up_to.update(stored)
                for tp in assigned:
                    if tp.topic not in runner.topics:  # a topic only others of the group read
                        continue
                    offset = stored.get(tp)
                    lowest[tp] = None if offset is None or (tp in lowest and lowest[tp] is None) \
                        else min(offset, lowest.get(tp, offset))
            self.group.resume = lowest
            self.group.drop_holds()  # the seeks below read any held erasure again
            await self.group.seek_to_resume()
            # A batch fetched around these seeks is dropped and read again (`ProjectorGroup.run`).
            self.group.epoch += 1
        log.info("%s assigned %s", self.group.name, sorted((tp.topic, tp.partition) for tp in assigned))


def barrier_segments(records: list[ConsumerRecord], projectors: Sequence[Projector]) -> list[list[ConsumerRecord]]:
    """`records` cut around each record some projector will not apply in a shared transaction
    (the record alone in its segment), in order. A projector alone on its consumer cuts them
    itself when it says how (optional `segments(records)`: its transactions, e.g. the erasure
    projector's batches of one tenant); else they are one segment."""
    if len(projectors) == 1:
        own = getattr(projectors[0], "segments", None)
        return own(records) if own is not None else ([list(records)] if records else [])
    segments: list[list[ConsumerRecord]] = []
    start = 0
    for i, record in enumerate(records):
        if any(not shares_transaction(p, [record]) for p in projectors):
            if i > start:
                segments.append(records[start:i])
            segments.append([record])
            start = i + 1
    if start < len(records):
        segments.append(records[start:])
    return segments


async def _all_or_none(calls: list) -> None:
    """Await every call; when one fails, cancel the others before raising (none outlives the group)."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class ProjectorGroup:
    """Projectors on one consumer (subscribed to the union of their topics): one fetch per batch,
    then every projector applies the records of its topics (skipping what it applied already) in
    **one transaction** on the first
    projector's connection, with every projector's stored offsets in it: one BEGIN/COMMIT and
    one offsets statement per batch for the whole group. When that transaction fails (a record
    one of them refuses, an outage), the batch is applied again the careful way: each projector
    in its own transaction, concurrently, with its record isolation and outage retries. A group of
    one is a projector with a consumer of its own. The next fetch waits for the slowest of them,
    so a projector that calls a model (the message index) keeps a consumer of its own
    (memory_agent/worker.py)."""

    def __init__(self, settings: Settings, projectors: Sequence[Projector], *, max_batch: int = 2000,
                 runners: Sequence[ProjectorRunner] | None = None, fetch_min_bytes: int = 1,
                 time_ordered: bool | None = None, group_name: str | None = None) -> None:
        """`fetch_min_bytes` > 1: a linger while records flow (`FetchPace`), for projectors whose
        rows may come up to `fetch_max_wait_ms` later. `time_ordered`: hold each erasure until the
        messages projector (wherever it runs: its positions are read from PostgreSQL) has passed
        it (time_order.py); by default when the group has both the messages and the erasure
        projector."""
        self.settings, self.max_batch, self.fetch_min_bytes = settings, max_batch, fetch_min_bytes
        # The union of their topics: each projector is handed the records of its own (`fresh`).
        self.topics = sorted({topic for p in projectors for topic in p.topics(settings)})
        self.runners = list(runners) if runners is not None else [
            ProjectorRunner(settings, p, max_batch=max_batch) for p in projectors]
        self.name = "+".join(p.name for p in projectors)
        prefix = f"{settings.kafka.topic_prefix}.{settings.generation}"
        # `group_name`: a Kafka group id that stays when its members change (catalog.LINGERING).
        self.group_id = (f"{prefix}.projectors.{group_name}" if group_name else
                         self.runners[0].group_id if len(projectors) == 1 else f"{prefix}.projectors.{self.name}")
        self.consumer: AIOKafkaConsumer | None = None
        self._to_commit: dict[TopicPartition, int] = {}
        self._next_commit = 0.0
        self.lock = asyncio.Lock()  # a batch being applied, or a rebalance: one at a time
        self.epoch = 0  # assignments seen: a batch fetched under an older one is not applied
        self.resume: dict[TopicPartition, int | None] = {}  # the last assignment's positions
        # User erasures held back until the messages projector passed their time (time_order.py).
        names = {r.projector.name for r in self.runners}
        self.time_ordered = {time_order.MESSAGES, "erasure"} <= names if time_ordered is None else time_ordered
        self.holds: dict[tuple[str, int, int], time_order.Hold] = {}
        # Released or past the bound: applied when read again, with the targets the hold found.
        self.cleared: dict[tuple[str, int, int], dict[int, int]] = {}

    async def run(self) -> None:
        """Consume until cancelled; one projector refusing to go on (a bug) stops the group."""
        loop = asyncio.get_running_loop()
        try:
            for runner in self.runners:
                await runner.open()
            self.consumer = projector_consumer(self.settings, self.group_id, fetch_min_bytes=self.fetch_min_bytes)
            self.consumer.subscribe(self.topics, listener=_SeekShared(self))
            pace = FetchPace(self.consumer, busy_ms=self.settings.kafka.fetch_max_wait_ms,
                             idle_ms=self.settings.kafka.idle_fetch_max_wait_ms, busy_min_bytes=self.fetch_min_bytes)
            await self.consumer.start()
            while True:
                epoch = self.epoch
                batches = await retry_transient(
                    lambda: self.consumer.getmany(timeout_ms=200, max_records=self.max_batch),
                    what=f"projectors {self.name} fetch",
                )
                for runner in self.runners:
                    runner.ready.set()
                records = [r for recs in batches.values() for r in recs]
                pace.saw(bool(records))
                # The Kafka-side commit is for lag monitoring only (PostgreSQL holds the real
                # positions): at most once a second, and also after the last batch (an empty
                # fetch comes at least every 200 ms).
                if self._to_commit and loop.time() >= self._next_commit:
                    await self._commit_kafka()
                    self._next_commit = loop.time() + KAFKA_COMMIT_INTERVAL_S
                if not records:
                    if self.holds:
                        async with self.lock:
                            await self._release()
                    continue
                async with self.lock:
                    if self.holds:
                        await self._release()
                    if epoch != self.epoch:
                        # Fetched while a rebalance sought the partitions to the projectors'
                        # stored offsets: from before the seek (maybe past what a projector new
                        # to the group must read) or after it, the batch cannot tell. Nothing
                        # was applied since, so the same seek again reads it all anew.
                        await self.seek_to_resume()
                        continue
                    await self.apply(records)
                self._to_commit.update({tp: recs[-1].offset + 1 for tp, recs in batches.items() if recs})
        finally:
            await self._commit_kafka()
            if self.consumer is not None:
                try:
                    await self.consumer.stop()
                except Exception:  # noqa: BLE001 - best effort on shutdown
                    log.exception("error while stopping the consumer of %s", self.name)
            for runner in self.runners:
                await runner.stop()

    async def apply(self, records: list[ConsumerRecord]) -> None:
        """The batch for every projector. A record some projector must apply in a transaction of
        its own (an erasure) is a barrier: every projector applies what comes before it, then
        it, then the rest, so each sees the log in its order around it (an erasure applied
        after a message written after it would delete that message: domain/erasure.py). A user
        erasure waits, besides, for what other partitions hold from before it (time_order.py)."""
        if self.holds:
            records = self._hold_back(records)
        segments = barrier_segments(records, [runner.projector for runner in self.runners])
        for i, segment in enumerate(segments):
            for j, record in enumerate(segment if self.time_ordered else ()):
                if time_order.gates(record) and not await self._may_apply(record):
                    if j:
                        await self._apply_segment(segment[:j])
                    await self.apply([*segment[j:], *(r for later in segments[i + 1:] for r in later)])  # held back
                    return
            await self._apply_segment(segment)

    def _hold_back(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """The records before every hold's limit; a partition cut is read again from its first
        record left out, paused until the holds are released."""
        kept, left_out = time_order.cut(records, time_order.limits(list(self.holds.values())))
        for tp, offset in left_out.items():
            self.consumer.seek(tp, offset)
            self.consumer.pause(tp)
        return kept

    async def _may_apply(self, erasure: ConsumerRecord) -> bool:
        """Whether the messages projector has passed this user erasure's time on every
        partition; if not, it is held (`holds`) until it has, at most MAX_HOLD_S."""
        key = (erasure.topic, erasure.partition, erasure.offset)
        if key in self.cleared:
            self._bound(erasure, self.cleared.pop(key))
            return True
        hold = self.holds.get(key)
        if hold is None:
            goal = await retry_transient(lambda: time_order.targets(self.consumer, erasure),
                                         what=f"projectors {self.name} erasure targets")
            hold = time_order.Hold(TopicPartition(erasure.topic, erasure.partition), erasure.offset,
                                   erasure.timestamp, goal, asyncio.get_running_loop().time())
        read = await time_order.positions(self.runners[0].conn, erasure.topic)
        if time_order.ready(read, hold, [h for k, h in self.holds.items() if k != key]):
            self.holds.pop(key, None)
            self._bound(erasure, hold.targets)
            return True
        if key not in self.holds:
            log.info("projectors %s: user erasure at %s:%d waits for the messages of other partitions written"
                     " before it", self.name, erasure.partition, erasure.offset)
        self.holds[key] = hold
        return False

    async def _release(self) -> None:
        """Holds whose targets the messages projector reached (or past the bound) are released:
        the partitions resume, the held erasure is read again and applied."""
        now, released = asyncio.get_running_loop().time(), False
        read = await time_order.positions(self.runners[0].conn, next(iter(self.holds.values())).erasure.topic)
        for key, hold in list(self.holds.items()):
            late = now - hold.since > time_order.MAX_HOLD_S
            if late or time_order.ready(read, hold, [h for k, h in self.holds.items() if k != key]):
                if late:
                    log.warning("projectors %s: user erasure at %s:%d applied after %.0fs without the messages"
                                " projector having passed its time on every partition", self.name,
                                hold.erasure.partition, hold.offset, now - hold.since)
                del self.holds[key]
                self.cleared[key] = hold.targets
                released = True
        if released and self.consumer.paused():  # the holds left pause again what passes their limits
            self.consumer.resume(*self.consumer.paused())

    def _bound(self, erasure: ConsumerRecord, targets: dict[int, int]) -> None:
        """Where the erasure's scope ends on the log (the hold's targets), for projectors that
        take it (projections/erasure.py: what was written at or past it is not erased)."""
        for runner in self.runners:
            take = getattr(runner.projector, "bound", None)
            if take is not None:
                take(erasure, targets)

    def drop_holds(self) -> None:
        """A new assignment: every position sought again, nothing paused."""
        self.holds.clear()
        self.cleared.clear()

    async def _apply_segment(self, records: list[ConsumerRecord]) -> None:
        """In one transaction, or one each when that fails; those that share go first."""
        work = [(runner, fresh) for runner in self.runners if (fresh := runner.fresh(records))]
        together = [(runner, fresh) for runner, fresh in work if shares_transaction(runner.projector, fresh)]
        if len(together) > 1:
            try:
                await self._apply_together(together)
            except Exception as exc:  # noqa: BLE001 - nothing of it committed: the careful way decides
                log.info("projectors %s: the batch of %d in one transaction failed (%s); applying it per"
                         " projector", self.name, len(records), isolation.describe(exc))
        # What is left (all of it when the shared transaction failed): each in its own, those
        # that share before the others.
        await _all_or_none([runner.process(records) for runner, _ in together])
        alone = [runner for runner, _ in work if all(runner is not r for r, _ in together)]
        await _all_or_none([runner.process(records) for runner in alone])

    async def _apply_together(self, work: list[tuple[ProjectorRunner, list[ConsumerRecord]]]) -> None:
        """Every projector's rows, their dead letters, every projector's offsets: one transaction.
        The letters go out after every projector applied, so a refused record (which sends the
        batch the careful way) has sent none twice."""
        first = self.runners[0]
        conn = first.conn
        async with conn.transaction():
            letters = [(runner.projector.name, await _traced_apply(runner.projector, conn, fresh))
                       for runner, fresh in work]
            for name, refused in letters:
                if refused:
                    await publish_letters(first.producer, self.settings, name, refused)
            await save_all_positions(conn, {runner.projector.name: next_positions(fresh) for runner, fresh in work})
        metrics.PROJECTOR_TRANSACTIONS.labels(projectors=self.name).inc()
        for runner, fresh in work:
            runner.applied(fresh)
            metrics.PROJECTED.labels(projector=runner.projector.name).inc(len(fresh))

    async def seek_to_resume(self) -> None:
        """Every assigned partition to the lowest offset its projectors stored (the beginning
        when one of them has none)."""
        assigned = self.consumer.assignment()
        for tp, offset in self.resume.items():
            if tp not in assigned:
                continue
            if offset is None:
                await self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)

    async def _commit_kafka(self) -> None:
        offsets, self._to_commit = self._to_commit, {}
        if not offsets or self.consumer is None:
            return
        try:
            await self.consumer.commit(offsets)
        except Exception as exc:  # noqa: BLE001 - rebalance in progress etc.; harmless
            log.debug("kafka offset commit skipped: %s", exc)

"""Runs projectors: Kafka batches -> one Postgres transaction per projector with rows + offsets.

Projectors that read the same topics share one consumer (`ProjectorGroup`): one fetch, then
each projector applies the batch in its own transaction with its own stored offsets, as a
projector with a consumer of its own (`ProjectorRunner`) does. Sharing changes who fetches,
not what is applied: a partition is read from the lowest position any of them stored, and each
skips what it applied already (`applied_up_to`), so exactly-once projection holds per projector."""

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

from memory_agent import metrics
from memory_agent.settings import Settings
from projections import dead_letter, isolation
from projections.db import connect
from projections.dead_letter import DeadLetter
from projections.fetch_pace import FetchPace
from projections.outage import retry_transient

log = logging.getLogger(__name__)

KAFKA_COMMIT_INTERVAL_S = 1.0


class Projector(Protocol):
    """Applies a batch inside an open transaction; returns the records it refused."""

    name: str

    def topics(self, settings: Settings) -> list[str]: ...

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]: ...


async def load_offsets(conn: psycopg.AsyncConnection, projector: str) -> dict[TopicPartition, int]:
    rows = await conn.execute(
        "SELECT topic, partition, next_offset FROM projector_offsets WHERE projector = %s", (projector,)
    )
    return {TopicPartition(t, p): o for t, p, o in await rows.fetchall()}


async def save_offsets(conn: psycopg.AsyncConnection, projector: str, records: Sequence[ConsumerRecord]) -> None:
    highest: dict[TopicPartition, int] = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        highest[tp] = max(highest.get(tp, -1), r.offset + 1)
    await save_positions(conn, projector, highest)


async def save_positions(conn: psycopg.AsyncConnection, projector: str, positions: dict[TopicPartition, int]) -> None:
    """Next offset to read per partition; a position never moves back. One statement for every
    partition (executemany would open a pipeline and send one per partition)."""
    if not positions:
        return
    await conn.execute(
        "INSERT INTO projector_offsets (projector, topic, partition, next_offset)"
        " SELECT %s, t, p, o FROM unnest(%s::text[], %s::int[], %s::bigint[]) AS u(t, p, o)"
        " ON CONFLICT (projector, topic, partition) DO UPDATE SET"
        " next_offset = GREATEST(projector_offsets.next_offset, EXCLUDED.next_offset), updated_at = now()",
        (projector, [tp.topic for tp in positions], [tp.partition for tp in positions], list(positions.values())),
    )


async def apply_records(
    conn: psycopg.AsyncConnection, producer: AIOKafkaProducer, settings: Settings, projector: Projector,
    records: Sequence[ConsumerRecord], apply: Callable[[], Awaitable[list[DeadLetter]]] | None = None,
) -> None:
    """One projector batch in one transaction: rows, dead letters of refused records, offsets.
    `apply` replaces `projector.apply(conn, records)` (for a caller that decoded them already).
    A record the database refuses is found and dead-lettered; the others are applied
    (projections/isolation.py)."""
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
        letters = await (apply() if apply is not None else projector.apply(conn, records))
        if letters:
            await publish_letters(producer, settings, name, letters)
        await save_offsets(conn, name, records)
    metrics.PROJECTED.labels(projector=name).inc(len(records))
    metrics.PROJECTOR_TRANSACTIONS.labels(projectors=name).inc()


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


class _SeekFromPostgres(ConsumerRebalanceListener):
    """On assignment, resume each partition at the offset stored with the rows."""

    def __init__(self, runner: "ProjectorRunner") -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked) -> None:
        # Let the batch in flight commit before the partitions move.
        async with self.runner.batch_lock:
            return None

    async def on_partitions_assigned(self, assigned) -> None:
        # A connection of its own: the main connection belongs to the batch loop.
        async with self.runner.batch_lock:
            stored = await self.runner.stored_offsets()
            self.runner.applied_up_to.update(stored)
        for tp in assigned:
            if tp in stored:
                self.runner.consumer.seek(tp, stored[tp])
            else:
                await self.runner.consumer.seek_to_beginning(tp)
        log.info("%s assigned %s", self.runner.projector.name, sorted((tp.topic, tp.partition) for tp in assigned))


def projector_consumer(settings: Settings, group_id: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
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
    """One consumer group member for one projector; `run()` until cancelled or stopped."""

    def __init__(self, settings: Settings, projector: Projector, *, max_batch: int = 2000,
                 kafka_commits: bool = True) -> None:
        """`kafka_commits=False`: a member of a `ProjectorGroup`, which fetches and commits."""
        self.settings, self.kafka_commits = settings, kafka_commits
        self.projector = projector
        self.max_batch = max_batch
        self.group_id = f"{settings.kafka.topic_prefix}.{settings.generation}.projector.{projector.name}"
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None
        self.conn: psycopg.AsyncConnection | None = None
        self.ready = asyncio.Event()
        self.batch_lock = asyncio.Lock()
        # Next offset already applied per partition: a redelivered record is skipped whole,
        # so it cannot be dead-lettered twice either.
        self.applied_up_to: dict[TopicPartition, int] = {}
        self._stopping = False
        # Kafka-side positions (lag monitoring only) not yet committed, sent at most once a second.
        self._to_commit: dict[TopicPartition, int] = {}
        self._commit_timer: asyncio.TimerHandle | None = None
        self._commit_task: asyncio.Future | None = None
        self.pace: FetchPace | None = None

    async def open(self) -> None:
        """The connection and the dead-letter producer."""
        self.conn = await retry_transient(
            lambda: connect(self.settings), what=f"projector {self.projector.name} connect"
        )
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka.bootstrap_servers, enable_idempotence=True, acks="all"
        )
        await self.producer.start()

    async def start(self) -> None:
        await self.open()
        self.consumer = projector_consumer(self.settings, self.group_id)
        self.consumer.subscribe(self.projector.topics(self.settings), listener=_SeekFromPostgres(self))
        self.pace = FetchPace(self.consumer, busy_ms=self.settings.kafka.fetch_max_wait_ms,
                              idle_ms=self.settings.kafka.idle_fetch_max_wait_ms)
        await self.consumer.start()

    async def stop(self) -> None:
        self._stopping = True
        if self._commit_timer is not None:
            self._commit_timer.cancel()
            self._commit_timer = None
        await self._commit_kafka()  # what is still pending, before the consumer leaves
        for closer in (self.consumer and self.consumer.stop, self.producer and self.producer.stop):
            if closer:
                try:
                    await closer()
                except Exception:  # noqa: BLE001 - best effort on shutdown
                    log.exception("error while stopping %s", self.projector.name)
        if self.conn is not None:
            await self.conn.close()

    async def run(self) -> None:
        """Consume forever; each batch commits rows and offsets together."""
        await self.start()
        try:
            while not self._stopping:
                batches = await retry_transient(
                    lambda: self.consumer.getmany(timeout_ms=200, max_records=self.max_batch),
                    what=f"projector {self.projector.name} fetch",
                )
                self.ready.set()
                records = [r for recs in batches.values() for r in recs]
                self.pace.saw(bool(records))
                if records:
                    await self.process(records)
        finally:
            await self.stop()

    async def process(self, records: list[ConsumerRecord]) -> None:
        async with self.batch_lock:
            fresh = [r for r in records if r.offset >= self.applied_up_to.get(TopicPartition(r.topic, r.partition), 0)]
            if fresh:
                await self._apply(fresh)

    async def _apply(self, records: list[ConsumerRecord]) -> None:
        await self.apply_through_outages(records)
        offsets = {}
        for r in records:
            offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
        self.applied_up_to.update(offsets)
        if not self.kafka_commits:
            return
        # Kafka-side commit is only for lag monitoring; Postgres holds the real position. One
        # commit a second at most (a commit per small batch cost as much as the batch's rows).
        self._to_commit.update(offsets)
        if self._commit_timer is None:
            self._commit_timer = asyncio.get_running_loop().call_later(KAFKA_COMMIT_INTERVAL_S, self._commit_soon)

    def _commit_soon(self) -> None:
        self._commit_timer = None
        self._commit_task = asyncio.ensure_future(self._commit_kafka())

    async def _commit_kafka(self) -> None:
        offsets, self._to_commit = self._to_commit, {}
        if not offsets or self.consumer is None:
            return
        try:
            await self.consumer.commit(offsets)
        except Exception as exc:  # noqa: BLE001 - rebalance in progress etc.; harmless
            log.debug("kafka offset commit skipped: %s", exc)

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
    """A shared consumer resumes each partition at the lowest offset its projectors stored."""

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
                    offset = stored.get(tp)
                    lowest[tp] = None if offset is None or (tp in lowest and lowest[tp] is None) \
                        else min(offset, lowest.get(tp, offset))
            self.group.resume = lowest
            await self.group.seek_to_resume()
            # A batch fetched around these seeks is dropped and read again (`ProjectorGroup.run`).
            self.group.epoch += 1
        log.info("%s assigned %s", self.group.name, sorted((tp.topic, tp.partition) for tp in assigned))


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
    """Projectors that read the same topics, on one consumer: one fetch per batch, then every
    projector applies it (concurrently, each on its own connection and in its own transaction
    with its stored offsets, skipping what it applied already). The next fetch waits for the
    slowest of them, so a projector that calls a model (the message index) keeps a consumer of
    its own (memory_agent/worker.py)."""

    def __init__(self, settings: Settings, projectors: Sequence[Projector], *, max_batch: int = 2000) -> None:
        topics = {tuple(sorted(p.topics(settings))) for p in projectors}
        if len(topics) != 1:
            raise ValueError(f"projectors sharing a consumer must read the same topics: {sorted(topics)}")
        self.settings, self.max_batch = settings, max_batch
        self.topics = list(topics.pop())
        self.runners = [ProjectorRunner(settings, p, max_batch=max_batch, kafka_commits=len(projectors) == 1)
                        for p in projectors]
        self.name = "+".join(p.name for p in projectors)
        prefix = f"{settings.kafka.topic_prefix}.{settings.generation}"
        self.group_id = self.runners[0].group_id if len(projectors) == 1 else f"{prefix}.projectors.{self.name}"
        self.consumer: AIOKafkaConsumer | None = None
        self._to_commit: dict[TopicPartition, int] = {}
        self._next_commit = 0.0
        self.lock = asyncio.Lock()  # a batch being applied, or a rebalance: one at a time
        self.epoch = 0  # assignments seen: a batch fetched under an older one is not applied
        self.resume: dict[TopicPartition, int | None] = {}  # the last assignment's positions

    async def run(self) -> None:
        """Consume until cancelled; one projector refusing to go on (a bug) stops the group."""
        if len(self.runners) == 1:
            await self.runners[0].run()
            return
        loop = asyncio.get_running_loop()
        try:
            for runner in self.runners:
                await runner.open()
            self.consumer = projector_consumer(self.settings, self.group_id)
            self.consumer.subscribe(self.topics, listener=_SeekShared(self))
            pace = FetchPace(self.consumer, busy_ms=self.settings.kafka.fetch_max_wait_ms,
                             idle_ms=self.settings.kafka.idle_fetch_max_wait_ms)
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
                # Lag monitoring only, as a single projector's: at most once a second, and also
                # after the last batch (an empty fetch comes at least every 200 ms).
                if self._to_commit and loop.time() >= self._next_commit:
                    await self._commit_kafka()
                    self._next_commit = loop.time() + KAFKA_COMMIT_INTERVAL_S
                if not records:
                    continue
                async with self.lock:
                    if epoch != self.epoch:
                        # Fetched while a rebalance sought the partitions to the projectors'
                        # stored offsets: from before the seek (maybe past what a projector new
                        # to the group must read) or after it, the batch cannot tell. Nothing
                        # was applied since, so the same seek again reads it all anew.
                        await self.seek_to_resume()
                        continue
                    await _all_or_none([runner.process(records) for runner in self.runners])
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

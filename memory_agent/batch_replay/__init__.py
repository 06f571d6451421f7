"""Batch replay: rebuild a generation's window, chunks + facts and topic systems from the log
without the stream agents, then hand the result over to them.

Per partition of the conversation topic, up to the end it had when the replay started:
read it once, decode each record once, project the messages (COPY) while the pure window
fold runs over the history in memory (streams/window/batch.py), answer the summary
requests in waves (one LLM-cache lookup per wave, the misses to the LLM), write the
derived events to the generation's topic and project them; then the chunk fold likewise
(streams/facts/batch.py, memory_agent/batch_replay/facts.py); with the topic system, once
every partition got that far, the log's erasures are applied and the topic fold runs
(memory_agent/batch_replay/topics.py). Then hand over: the final
fold states go to the conversation processor's table changelog (one record per conversation,
every system's state in it) and the processor's and stages' consumer
groups are committed at the hand-over offsets. The worker then starts as usual and
follows the live log from there.

A partition is done once its hand-over offset is committed for the agents' group; a
worker that dies in the middle redoes the unfinished partitions when it starts again
(rows are upserts and positions never move back; the derived topic may then hold the
interrupted attempt's events too, which projecting again changes nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata
from psycopg import sql

from memory_agent.batch_replay.facts import FactsBatch, close_stage, open_stage
from memory_agent.batch_replay.produce import send_all
from memory_agent.batch_replay.states import StateRecords
from memory_agent.batch_replay.topics import TopicsBatch
from core.embeddings.factory import make_embedder
from core.llm.cache import CachedSummarizer
from runtime.llm_factory import make_summarizer
from core.llm.port import LlmError, Summarizer, SummaryOutput
from core.settings import Settings
from runtime.db import connect
from projections.facts import FactsProjector
from projections.erasure import ErasureProjector
from projections.lineage import TopicLineageProjector
from projections.memory import MemoryProjector, load_settled
from projections.message_index import MessageIndexProjector
from projections.messages import MessagesProjector
from projections.runner import apply_records, load_offsets, save_positions
from projections.topics import TopicsProjector
from schemas.codec import Event, encode
from schemas.envelope import Envelope
from schemas.erasure_events import ERASURE_TYPES
from schemas.registry import MESSAGE_APPENDED, REGISTRY
from runtime.kafka_topics import (
    TopicSpec,
    agents_group,
    changelog_topic,
    ensure_topics,
    stages_group,
    topic_specs,
)
from streams.topics_memory.summarize import make_topic_summarizer
from streams.processor import CONVERSATION_TABLE
from streams.window.agent import window_config
from streams.window.slice import NAME as WINDOW_SLICE, dump as dump_window
from streams.window.batch import Conversation, HistoryFold, Pending
from streams.window.summarize import completed_event, failed_event

log = logging.getLogger(__name__)

BATCH_SYSTEMS = frozenset({"window", "facts", "topics"})
_CHUNK = 5000  # records per projector transaction
# Vector indexes the batch builds once after its bulk load instead of row by row: inserting
# 5,000 vectors into an HNSW index cost 10.3 s of PostgreSQL here, without it 0.6 s plus a
# 2.3 s build (docs/replay.md). memory_items' is the only vector index left (0055 dropped the
# per-table ones); its rows come from the source tables' triggers, so the load fills the table
# and the build indexes every row once. Name -> definition, exactly as the migration creates it
# (projections/migrations/0020_memory_items.sql; a test compares the two).
DEFERRED_INDEXES = {
    "memory_items_embedding":
        "memory_items USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)",
}
_BUILD_MEMORY = "512MB"  # maintenance_work_mem of the build: the graph of ~100,000 vectors fits


class BatchReplayError(Exception):
    """The generation cannot be rebuilt in batch (its settings need the stream replay)."""


@dataclass
class PartitionReport:
    partition: int
    events: int
    summaries: int
    cache_hits: int
    llm_calls: int
    failed: int
    seconds: float
    phases: dict[str, float]  # seconds per phase; "messages" is what remained after the others
    facts: dict[str, float]  # chunk waves, chunks recorded, failed attempts, seconds per step (facts system)
    topics: dict[str, float]  # messages folded, compactions, summary waves, seconds per step (topics system)


class _Phases:
    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def clock(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 2)

    async def timed(self, name: str, awaitable):
        with self.clock(name):
            return await awaitable

    def total(self) -> float:
        return round(time.perf_counter() - self.started, 2)


def check_batchable(settings: Settings) -> None:
    extra = set(settings.systems) - BATCH_SYSTEMS
    if extra:
        raise BatchReplayError(
            f"batch replay rebuilds the {' and '.join(sorted(BATCH_SYSTEMS))} systems only; this generation"
            f" also runs {sorted(extra)} (use the stream replay, `replay start --mode stream`)"
        )
    if settings.replay_until is None:
        raise BatchReplayError("batch replay needs replay_until (set by `replay start`)")


def run_batch(settings: Settings) -> list[PartitionReport]:
    """The worker's entry: `settings.window.replay_batch_processes` processes take the
    partitions one at a time until none is left (every partition is independent)."""
    check_batchable(settings)
    changelogs = [TopicSpec(changelog_topic(settings, CONVERSATION_TABLE), settings.kafka.partitions,
                            {"cleanup.policy": "compact"})]
    asyncio.run(ensure_topics(settings, [*topic_specs(settings), *changelogs]))
    partitions = asyncio.run(_partitions_of_the_log(settings))
    if asyncio.run(_handed_over(settings, partitions)):
        # A start after the batch ended (`replay resume`, a restart): nothing to rebuild, the
        # vector index stays (built again only if a crash came between hand-over and build).
        build_deferred_indexes(settings)
        return []
    drop_deferred_indexes(settings)
    context = multiprocessing.get_context("spawn")
    taken = context.Value("i", 0)  # partitions handed out so far
    processes = max(1, min(settings.window.replay_batch_processes, partitions))
    # With the topic system: every process waits for the others twice (every partition's messages
    # projected; then every erasure of the log applied) before the topic folds (run_batch_replay).
    barriers = (context.Barrier(processes), context.Barrier(processes)) if "topics" in settings.systems else None
    children = [context.Process(target=_child, args=(settings, taken, partitions, barriers),
                                name=f"batch-replay-{n}") for n in range(1, processes)]
    for child in children:  # they import and connect while this process starts on the first partitions
        child.start()
    if barriers is not None and children:
        threading.Thread(target=_watch, args=(children, barriers), name="batch-replay-watch", daemon=True).start()
    try:
        # This process builds the vector index while the topic step runs (with the topic system).
        reports = asyncio.run(run_batch_replay(settings, _Claims(taken, partitions), barriers, build_index=True))
    except BaseException:
        for child in children:
            child.join()
        try:  # also after a failure: the stream projectors and the reads need them
            build_deferred_indexes(settings)
        except Exception:  # noqa: BLE001 - the batch's own error is the one to raise
            log.exception("batch replay of %s: building the vector indexes failed too", settings.generation)
        raise
    for child in children:
        child.join()
    build_deferred_indexes(settings)  # without the topic system (built already with it: nothing to do)
    failed = [child.name for child in children if child.exitcode != 0]
    if failed:
        raise BatchReplayError(f"{failed} failed (see the log above); starting the worker again resumes the batch")
    return reports


def _watch(children: list, barriers: tuple) -> None:
    """A child that dies (a crash, the OOM killer) before a barrier would leave the others waiting
    for it forever: the barriers are broken instead, and every process fails (BrokenBarrierError);
    starting the worker again resumes the batch."""
    while any(child.is_alive() for child in children):
        if any(child.exitcode not in (None, 0) for child in children):
            for barrier in barriers:
                barrier.abort()
            return
        time.sleep(0.5)


async def _handed_over(settings: Settings, partitions: int) -> bool:
    """Every partition of the log handed over to the agents already."""
    hand_over = _HandOver(settings)
    source = settings.kafka.conversation_topic
    for number in range(partitions):
        if not await hand_over.done(TopicPartition(source, number)):
            return False
    return True


def drop_deferred_indexes(settings: Settings) -> None:
    """Before the bulk load (a resumed batch drops them again and rebuilds over all rows)."""
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        for name in DEFERRED_INDEXES:
            conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(settings.pg_schema, name)))


def build_deferred_indexes(settings: Settings) -> None:
    """With `window.replay_index_build_workers` PostgreSQL workers (about twice as fast here
    with one), and again by the backend alone when that fails: a parallel build keeps its
    graph in shared memory, which a container's 64 MB /dev/shm may not hold (pgvector #453)."""
    workers = settings.window.replay_index_build_workers
    for attempt in ([workers, 0] if workers else [0]):
        clock = time.perf_counter()
        try:
            with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(_BUILD_MEMORY)))
                conn.execute(sql.SQL("SET max_parallel_maintenance_workers = {}").format(sql.Literal(attempt)))
                for name, definition in DEFERRED_INDEXES.items():
                    table, _, rest = definition.partition(" ")
                    conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} {}").format(
                        sql.Identifier(name), sql.Identifier(settings.pg_schema, table), sql.SQL(rest)))
        except psycopg.Error as error:
            if attempt == 0:
                raise
            log.warning("batch replay of %s: the parallel index build failed (%s); building it again without"
                        " parallel workers", settings.generation, error)
            continue
        log.info("batch replay of %s: vector indexes built in %.1fs (%d parallel workers)", settings.generation,
                 time.perf_counter() - clock, attempt)
        return


class _Claims:
    """The next partition nobody has taken yet, shared by the batch processes."""

    def __init__(self, taken, partitions: int) -> None:
        self.taken, self.partitions = taken, partitions

    def __call__(self) -> int | None:
        with self.taken.get_lock():
            partition = self.taken.value
            if partition >= self.partitions:
                return None
            self.taken.value += 1
            return partition


async def _partitions_of_the_log(settings: Settings) -> int:
    """As the topic has them (it may predate the current MEMORY_KAFKA__PARTITIONS)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([settings.kafka.conversation_topic])
    finally:
        await admin.close()
    return len(described["partitions"])


def _child(settings: Settings, taken, partitions: int, barriers=None) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(max(logging.INFO, logging.getLogger().level))
    from core import privacy  # noqa: PLC0415 - a spawned child: sealed events open here too

    privacy.install(settings)
    asyncio.run(run_batch_replay(settings, _Claims(taken, partitions), barriers))


# CPython's cyclic collector runs a young collection every 700 allocations net of frees. A batch
# allocates millions of objects that live until their partition is handed over (records, events,
# envelopes, fold states) and makes almost no cyclic garbage, so each collection traverses live
# objects for nothing: the topic step's fold and events took 13-25 % less CPU with the thresholds
# below than with the defaults, as without the collector (docs/scaling.md, replay11).
_BATCH_GC_THRESHOLDS = (100_000, 50, 100)


@contextlib.contextmanager
def fewer_collections(thresholds: tuple[int, int, int] = _BATCH_GC_THRESHOLDS):
    """The collector's thresholds raised while a batch runs; the old ones restored after (the
    worker goes on following the log with them)."""
    old = gc.get_threshold()
    gc.set_threshold(*thresholds)
    try:
        yield
    finally:
        gc.set_threshold(*old)


async def run_batch_replay(settings: Settings, claim: Callable[[], int | None] | None = None,
                           barriers: tuple | None = None, build_index: bool = False) -> list[PartitionReport]:
    """`_run_batch_replay` with the collector's thresholds raised (`fewer_collections`)."""
    with fewer_collections():
        return await _run_batch_replay(settings, claim, barriers, build_index)


async def _run_batch_replay(settings: Settings, claim: Callable[[], int | None] | None = None,
                            barriers: tuple | None = None, build_index: bool = False) -> list[PartitionReport]:
    """Rebuild the partitions `claim()` hands out (all of them by default) that are not
    handed over yet. With the topic system the partitions are rebuilt in two steps: first
    everything but the topics; then, once every batch process got there (`barriers`: shared by
    the processes; none when this is the only one), the log's erasures are applied (each process
    those of its own partitions, by the erasure projector's code: every message is projected by
    then, so each erasure finds its whole scope), and only then are the topics folded, with the
    shell's erasure check reading them: a message an erasure covers never reaches the topic fold,
    as in a stream replay whose erasure projector is ahead (its text would otherwise stay in the
    fold's state: titles, summaries). Then each partition is handed over.

    `build_index` (one process of the batch): with the topic system, the deferred vector indexes
    are built while the topics are folded and published, once every process has applied its
    erasures: every row they index (messages, their embeddings, chunks, facts) is written by then,
    and the topic step writes none."""
    check_batchable(settings)
    if claim is None:
        claim = iter([*range(await _partitions_of_the_log(settings)), None]).__next__
    hand_over = _HandOver(settings)
    summarizer = make_summarizer(settings) if "window" in settings.systems else None
    stage = await open_stage(settings) if "facts" in settings.systems else None
    index = MessageIndexProjector(settings) if settings.retrieval.index_messages else None
    topics = (make_embedder(settings), make_topic_summarizer(settings)) if "topics" in settings.systems else None
    kafka = settings.kafka
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap_servers, enable_auto_commit=False, isolation_level="read_committed",
        max_partition_fetch_bytes=16 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024,
        fetch_max_wait_ms=kafka.fetch_max_wait_ms,  # a long poll would hold up each reassignment
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.bootstrap_servers, enable_idempotence=True, acks="all", linger_ms=20,
        max_batch_size=1024 * 1024,
    )
    await consumer.start()
    await producer.start()
    reports = []
    deferred: list[_Partition] = []  # topic system: rebuilt up to the topics, waiting for the erasures
    try:
        while (number := claim()) is not None:
            source = TopicPartition(kafka.conversation_topic, number)
            if await hand_over.done(source):
                log.info("batch replay of %s: partition %d was handed over already", settings.generation, number)
                continue
            end = (await consumer.end_offsets([source]))[source]
            partition = _Partition(settings, summarizer, stage, index, consumer, producer, hand_over, source,
                                   topics)
            await partition.rebuild(end)
            if topics is None:
                reports.append(_logged(settings, await partition.finish()))
            else:
                deferred.append(partition)
        if topics is not None:
            await _wait(barriers, 0)
            for partition in deferred:
                await partition.erasures()
            await _wait(barriers, 1)
            building = asyncio.create_task(asyncio.to_thread(build_deferred_indexes, settings)) \
                if build_index else None
            try:
                for partition in deferred:
                    reports.append(_logged(settings, await partition.finish()))
            finally:
                if building is not None:
                    await building  # its error, if any, once the partitions are handed over
    except BaseException:
        for barrier in barriers or ():
            barrier.abort()  # the other processes stop waiting for this one (BrokenBarrierError)
        raise
    finally:
        await consumer.stop()
        await producer.stop()
        if summarizer is not None:
            await summarizer.aclose()
        if stage is not None:
            await close_stage(stage)
        if topics is not None:
            for closing in topics:
                await closing.aclose()
        if index is not None and index._embedder is not None:  # noqa: SLF001 - made on its first call
            await index.embedder.aclose()
    return reports


async def _wait(barriers: tuple | None, which: int) -> None:
    if barriers is not None:
        await asyncio.to_thread(barriers[which].wait)


def _logged(settings: Settings, r: PartitionReport) -> PartitionReport:
    log.info("batch replay of %s: partition %d: %d events, %d summaries (%d cached, %d LLM calls,"
             " %d failed), chunks %s, topics %s in %.1fs %s", settings.generation, r.partition, r.events,
             r.summaries, r.cache_hits, r.llm_calls, r.failed, r.facts, r.topics, r.seconds, r.phases)
    return r


class _HandOver:
    """Where the stream agents and stages of the generation take over from the batch."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.agents_group = agents_group(settings)
        self.stage_groups = [stages_group(settings)]  # the one group every stage of the generation shares
        self.changelog = changelog_topic(settings, CONVERSATION_TABLE)  # the conversation processor's table
        self.derived = settings.kafka.memory_topic(settings.generation)

    async def done(self, source: TopicPartition) -> bool:
        """Handed over already (an earlier run of the batch got that far)."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka.bootstrap_servers)
        await admin.start()
        try:
            committed = await admin.list_consumer_group_offsets(self.agents_group, partitions=[source])
        finally:
            await admin.close()
        return source in committed and committed[source].offset >= 0

    async def commit(self, source: TopicPartition, cut: int, derived_end: int) -> None:
        """The agents resume at `cut` of the log and `derived_end` of their own topic; the
        stages have nothing left to answer before `derived_end`."""
        derived = TopicPartition(self.derived, source.partition)
        for group in self.stage_groups:
            await _commit(self.settings, group, {derived: derived_end})
        await _commit(self.settings, self.agents_group, {source: cut, derived: derived_end})  # last: "done"


async def _commit(settings: Settings, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Commit for a group none of whose members runs yet (a manually assigned consumer)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit({tp: OffsetAndMetadata(offset, "") for tp, offset in offsets.items()})
    finally:
        await consumer.stop()


class _Partition:
    def __init__(self, settings: Settings, summarizer: Summarizer | None, stage, index: MessageIndexProjector | None,
                 consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, hand_over: _HandOver,
                 source: TopicPartition, topics: tuple | None = None) -> None:
        self.settings, self.summarizer, self.index = settings, summarizer, index
        self.consumer, self.producer, self.hand_over, self.source = consumer, producer, hand_over, source
        self.derived = TopicPartition(hand_over.derived, source.partition)
        self.messages = MessagesProjector(settings)
        self.window = "window" in settings.systems
        self.fold = HistoryFold(window_config(settings, summarizer), time.time(), settings.replay_until) \
            if self.window else None
        self.states = StateRecords()  # every system's final states, one record per conversation
        self.facts = FactsBatch(settings, stage, producer, self.derived, self.states) \
            if stage is not None else None
        self.topics = TopicsBatch(settings, *topics, producer, self.derived, self.states) \
            if topics is not None else None
        self.hits = self.calls = self.failed = 0

    async def rebuild(self, end: int) -> None:
        """Everything but the topics and the hand-over (`erasures`, `finish`)."""
        self.phases = phases = _Phases()
        records, decoded, cut = await phases.timed("read", self._read(end))
        self.records, self.decoded, self.cut, self.count = records, decoded, cut, len(records)
        async with await connect(self.settings) as messages_conn:
            # PostgreSQL writes the messages on its own core while the fold and summaries run here.
            projecting = asyncio.create_task(self._project_messages(messages_conn, records, decoded, cut))
            try:
                if self.window:
                    await self._window(phases, records, decoded)
            finally:
                await phases.timed("messages", asyncio.gather(projecting, return_exceptions=True))
            await projecting  # re-raises its error, if any
        # The message index follows the same records on its own connection while the chunk
        # waves run.
        following = asyncio.create_task(self._follow(phases, records, decoded, cut))
        try:
            if self.facts is not None:  # the stage reads the projected messages
                await phases.timed("facts", self.facts.rebuild(records, decoded))
        finally:
            await asyncio.gather(following, return_exceptions=True)
        await following  # re-raises its error, if any
        if self.topics is None:  # nothing else needs them
            self.records = self.decoded = []

    async def erasures(self) -> None:
        """The partition's erasures, by the erasure projector's own code (its positions too), once
        every partition's messages are projected."""
        projector = ErasureProjector(self.settings)
        found = [record for record, event in zip(self.records, self.decoded)
                 if isinstance(event, Event) and event.type in ERASURE_TYPES]
        if found:
            async with await connect(self.settings) as conn:
                await self.phases.timed("erasures", apply_records(conn, self.producer, self.settings, projector, found))

    async def finish(self) -> PartitionReport:
        """The topics (if on), the projectors' positions on the derived topic, the hand-over."""
        phases, records, decoded, cut = self.phases, self.records, self.decoded, self.cut
        if self.topics is not None:  # after the chunks: both write the derived topic
            await phases.timed("topics", self.topics.rebuild(records, decoded))
            self.records = self.decoded = []
        derived_end = (await self.consumer.end_offsets([self.derived]))[self.derived]
        async with await connect(self.settings) as conn, conn.transaction():
            # Every projector of the derived topic has applied what the batch wrote there (the topic
            # events by the topics and topic lineage projectors' own code; without the topics system
            # there are none, and the lineage projector starts after the rest rather than reading the
            # whole derived topic to skip it; the memory and facts projectors skip topic events).
            passed = [TopicLineageProjector.name]
            passed += [MemoryProjector.name] if self.window else []
            passed += [FactsProjector.name] if self.facts is not None else []
            passed += [TopicsProjector.name] if self.topics is not None else []
            for name in passed:
                await save_positions(conn, name, {self.derived: derived_end})
        await phases.timed("changelog", self.states.write(self.producer, self.hand_over.changelog,
                                                          self.source.partition))
        await phases.timed("hand-over", self.hand_over.commit(self.source, cut, derived_end))
        summaries = sum(len(c.requests) for c in self.fold.conversations.values()) if self.window else 0
        return PartitionReport(self.source.partition, self.count, summaries, self.hits, self.calls, self.failed,
                               phases.total(), phases.seconds,
                               {**self.facts.stats, **self.facts.seconds} if self.facts is not None else {},
                               {**self.topics.stats, **self.topics.seconds} if self.topics is not None else {})

    async def _window(self, phases: _Phases, records: list[ConsumerRecord], decoded: list) -> None:
        with phases.clock("fold"):
            for record, event in zip(records, decoded):
                if isinstance(event, Event):
                    self.fold.add(record.key, event)
        await phases.timed("summaries", self._answer())
        await phases.timed("derived", self._write_derived())
        self.states.add(WINDOW_SLICE, ((c.key, dump_window(c.key, self.fold.finish(c)))
                                       for c in self.fold.conversations.values()))

    async def _read(self, end: int) -> tuple[list[ConsumerRecord], list[Event | Exception], int]:
        """Records up to `end`, or up to the first message after replay_until (the live rule
        applies from there, so the stream agents take over at it): records, decoded, cut."""
        records: list[ConsumerRecord] = []
        decoded: list = []
        self.consumer.assign([self.source])
        self.consumer.seek(self.source, 0)
        position = 0
        until = self.settings.replay_until
        while position < end:
            batch = await self.consumer.getmany(self.source, timeout_ms=1000, max_records=20_000)
            for record in batch.get(self.source, []):
                if record.offset >= end:
                    return records, decoded, end
                event = self.messages.decode(record)
                if isinstance(event, Event) and event.type == MESSAGE_APPENDED and event.envelope.occurred_at >= until:
                    return records, decoded, record.offset
                records.append(record)
                decoded.append(event)
            position = await self.consumer.position(self.source)
        return records, decoded, end

    async def _project_messages(self, conn, records, decoded, cut: int) -> None:
        """As the messages projector would, from where it stands (an interrupted batch may
        have projected part of the partition: applying it again would count duplicates)."""
        async with conn.transaction():
            start = (await load_offsets(conn, self.messages.name)).get(self.source, 0)
        first = next((i for i, record in enumerate(records) if record.offset >= start), len(records))
        records, decoded = records[first:], decoded[first:]
        for i in range(0, len(records), _CHUNK):
            chunk, events = records[i:i + _CHUNK], decoded[i:i + _CHUNK]
            await apply_records(conn, self.producer, self.settings, self.messages, chunk,
                                apply=lambda c=chunk, e=events: self.messages.apply_decoded(conn, list(zip(c, e))))
        async with conn.transaction():
            await save_positions(conn, self.messages.name, {self.source: cut})

    async def _follow(self, phases: _Phases, records: list[ConsumerRecord], decoded: list, cut: int) -> None:
        """The message index over the partition up to `cut`, with its own code and positions,
        so it does not read the history again after the hand-over. (Erasures are left to the
        worker's erasure projector, which reads the log from its start once every partition is
        rebuilt: a `user.erased` sits on another partition than the user's conversations, and
        applied before they are rebuilt it would miss them.)"""
        if self.index is None:
            return
        async with await connect(self.settings) as conn:
            await phases.timed("index", self._project(conn, self.index, records, cut))

    async def _project(self, conn, projector, records: list[ConsumerRecord], cut: int) -> None:
        """`projector` over `records` from its own position, in transactions of `_CHUNK`."""
        async with conn.transaction():
            start = (await load_offsets(conn, projector.name)).get(self.source, 0)
        pending = [record for record in records if record.offset >= start]
        for i in range(0, len(pending), _CHUNK):
            await apply_records(conn, self.producer, self.settings, projector, pending[i:i + _CHUNK])
        async with conn.transaction():
            await save_positions(conn, projector.name, {self.source: cut})

    async def _answer(self) -> None:
        for index in range(self.fold.waves):
            wave = self.fold.wave(index)
            asked = [p for p in wave if p.call is not None]
            clock = time.perf_counter()
            cached = (await self.summarizer.cached_many([p.call for p in asked])
                      if isinstance(self.summarizer, CachedSummarizer) else [None] * len(asked))
            lookup_s = time.perf_counter() - clock
            self.hits += sum(output is not None for output in cached)
            missing = [p for p, output in zip(asked, cached) if output is None]
            self.calls += len(missing)
            answers = await asyncio.gather(*(self._ask(p) for p in missing))
            for pending, output in zip(asked, cached):
                if output is not None:
                    self._settle(pending, completed_event(pending.request.envelope, pending.request.payload,
                                                          output, lookup_s, pending.source_event_ids))
            for pending, envelope in zip(missing, answers):
                self._settle(pending, envelope)
            for pending in wave:
                if pending.call is None:
                    self._settle(pending, failed_event(pending.request.envelope, pending.request.payload,
                                                       pending.error, self.summarizer.model))

    async def _ask(self, pending: Pending) -> Envelope:
        c, request = pending.call, pending.request
        clock = time.perf_counter()
        try:
            output: SummaryOutput = await self.summarizer.summarize_window(
                c.previous_summary, c.new_messages, c.window_start_seq, c.window_end_seq)
        except LlmError as exc:
            return failed_event(request.envelope, request.payload, f"{type(exc).__name__}: {exc}",
                                self.summarizer.model)
        return completed_event(request.envelope, request.payload, output, time.perf_counter() - clock,
                               pending.source_event_ids)

    def _settle(self, pending: Pending, envelope: Envelope) -> None:
        event = Event(envelope, REGISTRY[envelope.type].payload.model_construct(**envelope.payload))
        self.failed += event.type != "summary.completed"
        pending.conversation.results[pending.request.payload.memory_id] = event

    async def _write_derived(self) -> int:
        """Requests and answers into the generation's topic, and their rows (the memory
        projector's bulk load, in one transaction with its position). Returns the topic's end."""
        await send_all(self.producer, self.derived.topic, self.derived.partition, (
            (conversation.key, encode(event.envelope)) for conversation in self.fold.conversations.values()
            for event in (*conversation.requests, *_in_order(conversation))))
        end = (await self.consumer.end_offsets([self.derived]))[self.derived]
        settled = [(r, c.results[r.payload.memory_id]) for c in self.fold.conversations.values() for r in c.requests]
        async with await connect(self.settings) as conn, conn.transaction():
            await load_settled(conn, settled)
            await save_positions(conn, MemoryProjector.name, {self.derived: end})
        return end



def _in_order(conversation: Conversation) -> list[Event]:
    """Every request has its answer once the waves are done."""
    return [conversation.results[r.payload.memory_id] for r in conversation.requests]

"""Batch replay of the chunks + facts system for one partition (memory_agent/batch_replay).

The pure chunk fold runs over the history in memory (streams/facts/batch.py); the requests in
flight are answered in waves by the stage's own code (streams/facts/stage.py: the projected
messages, the owner's related facts, the gate and extractor through the LLM cache, the
embeddings through the embedding cache), concurrently up to `llm.concurrency`. Each wave's
events go to the generation's derived topic and are projected at once by the facts
projector's own code with its position, so the next wave's related facts see them, as a
stream replay whose projector keeps up would. Then the final chunk states go into the conversation
processor's records for the hand-over (memory_agent/batch_replay/states.py).
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from memory_agent.batch_replay.coalesce import coalesce_lookups
from memory_agent.batch_replay.produce import send_all
from memory_agent.batch_replay.states import StateRecords
from memory_agent.batch_replay.steps import add_seconds
from core.embeddings.factory import make_embedder
from runtime.llm_factory import make_json_completer
from core.settings import Settings
from runtime.db import connect, open_pool
from runtime.dead_letter import DeadLetter
from projections.chunk_reads import PostgresChunkReads
from projections.facts import INSERT_CHUNK, FactsProjector, chunk_row
from projections.memory import MemoryProjector
from projections.runner import apply_records
from schemas.codec import Event, decode, encode
from schemas.envelope import Envelope, InvalidEvent
from schemas.facts_events import CHUNK_RECORDED, MANAGEMENT_TYPES, MEMORY_STORED
from schemas.limits import Limits
from streams.facts.agent import chunk_config, prompt_and_model
from streams.facts.batch import ChunkHistoryFold, as_event
from streams.facts.extractor import ChunkExtractor
from streams.facts.offline import ExistingFact, pick_related, related_query
from streams.facts.slice import NAME as FACTS_SLICE, dump as dump_chunks
from streams.facts.stage import ChunkInputs, ChunkStage, inputs_of

log = logging.getLogger(__name__)

_CHUNK = 2000  # derived records per projector transaction


class _BatchStage(ChunkStage):
    """The stage as the agents run it, except that (1) the batch owns each conversation's chain:
    a range an interrupted attempt recorded already is answered again (from the caches), not
    skipped, so the fold can go on; projecting it again changes nothing (ON CONFLICT); and
    (2) a wave's inputs are read from the projection in one go (`prefetch`), built by the
    stage's own `inputs_of`; a range not found complete there takes the stage's own path."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._ready: dict[tuple[str, str, int, int], ChunkInputs] = {}
        # Per conversation: the inputs its related facts were read for, the query, the stored facts.
        self._related_ready: dict[tuple[str, str], tuple[ChunkInputs, str, list[ExistingFact]]] = {}

    async def _already_recorded(self, cause, request) -> bool:
        return False

    async def prefetch(self, requests: list[Event]) -> None:
        keys = [(r.envelope.tenant_id, r.envelope.conversation_id, r.payload.start_seq, r.payload.end_seq_exclusive)
                for r in requests]
        conversations, rows = await self.reads.wave_rows(keys)
        self._ready = {}
        for i, key in enumerate(keys):
            inputs = inputs_of(conversations.get(key[:2]), rows.get(i, []), key[2], key[3])
            if inputs is not None:
                self._ready[key] = inputs
        await self._prefetch_related()

    async def _prefetch_related(self) -> None:
        """The related facts of every range read above, in one query (the stage asks one per range).
        Nothing is projected while a wave runs, so each range gets the rows its own query would."""
        self._related_ready = {}
        if self.related_facts <= 0:
            return
        asked = [(key, inputs, related_query(inputs.messages)) for key, inputs in self._ready.items()]
        asked = [item for item in asked if item[2]]
        if not asked:
            return
        found = await self.reads.wave_related([(key[0], inputs.owner_user_id, inputs.subject_id, query,
                                                inputs.observed_at) for key, inputs, query in asked],
                                              self.related_facts)
        for index, (key, inputs, query) in enumerate(asked):
            self._related_ready[key[:2]] = (inputs, query, [ExistingFact(*row) for row in found.get(index, [])])

    async def _related(self, cause, inputs: ChunkInputs) -> list[ExistingFact]:
        ready = self._related_ready.pop((cause.tenant_id, cause.conversation_id), None)
        if ready is None or ready[0] is not inputs:
            return await super()._related(cause, inputs)
        _, query, stored = ready
        recent = self._recent.get((cause.tenant_id, cause.conversation_id), [])
        return pick_related(stored, recent, query, self.related_facts)

    async def _inputs(self, cause, request) -> ChunkInputs:
        key = (cause.tenant_id, cause.conversation_id, request.start_seq, request.end_seq_exclusive)
        ready = self._ready.pop(key, None)
        return ready if ready is not None else await super()._inputs(cause, request)


async def open_stage(settings: Settings) -> ChunkStage:
    """One stage per batch process (its pool, LLM client and caches serve every partition)."""
    reads = PostgresChunkReads(await open_pool(settings))
    facts = settings.facts
    completer, embedder = make_json_completer(settings), make_embedder(settings)
    coalesce_lookups(completer, embedder)  # a wave's cache lookups in one query each
    return _BatchStage(ChunkExtractor(settings, completer), embedder, reads, inputs_wait_s=facts.inputs_wait_s,
                       max_event_bytes=settings.kafka.max_event_bytes, related_facts=facts.related_facts)


async def close_stage(stage: ChunkStage) -> None:
    await stage.reads.pool.close()
    await stage.embedder.aclose()
    if stage.extractor.completer is not None:
        await stage.extractor.completer.aclose()


class FactsBatch:
    """Chunks and facts of one partition; `stats` counts waves, chunks, failures and the ranges
    whose inputs the wave's reads found complete."""

    def __init__(self, settings: Settings, stage: ChunkStage, producer: AIOKafkaProducer, derived: TopicPartition,
                 states: StateRecords) -> None:
        self.settings, self.stage, self.producer, self.derived = settings, stage, producer, derived
        self.states = states
        self.projector = FactsProjector(settings)
        # The derived topic's other projector with rows of its own: the memory projector (window
        # system) decodes these events and dead-letters an invalid one. Applied here, by its own
        # code and with its position, it does not read them all again after the hand-over.
        self.others = [MemoryProjector(settings)] if "window" in settings.systems else []
        self.fold = ChunkHistoryFold(chunk_config(settings), time.time(), *prompt_and_model(settings))
        self.stats = {"waves": 0, "chunks": 0, "failed": 0, "prefetched": 0}
        self.seconds: dict[str, float] = {}  # per step of the waves, summed (the worker log shows them)

    def _add(self, step: str, since: float) -> float:
        return add_seconds(self.seconds, step, since)

    async def rebuild(self, records: list[ConsumerRecord], decoded: list) -> None:
        """Run after the partition's messages are projected (the stage reads them)."""
        clock = time.perf_counter()
        first: list[tuple[bytes, Envelope]] = []
        for record, event in zip(records, decoded):
            if isinstance(event, Event):
                first += [(record.key, envelope) for envelope in self.fold.add(record.key, event)]
        self._add("fold", clock)
        quiet = logging.getLogger("streams.facts.stage")
        level = quiet.level
        quiet.setLevel(max(quiet.getEffectiveLevel(), logging.WARNING))  # not a line per chunk
        try:
            async with await connect(self.settings) as conn:
                await self._publish(conn, first)
                while wave := self.fold.wave():
                    await self._answer(conn, self.stage, wave)
        finally:
            quiet.setLevel(level)
        self._hand_over()

    async def _answer(self, conn, stage: ChunkStage, wave) -> None:
        self.stats["waves"] += 1
        limit = asyncio.Semaphore(max(1, self.settings.llm.concurrency))

        async def ask(conversation):
            async with limit:
                return await stage.handle(conversation.asked)

        clock = time.perf_counter()
        await stage.prefetch([c.asked for c in wave])
        self.stats["prefetched"] += len(stage._ready)
        clock = self._add("prefetch", clock)
        results = await asyncio.gather(*(ask(c) for c in wave))
        clock = self._add("stage", clock)
        out: list[tuple[bytes, Envelope]] = []
        for conversation, result in zip(wave, results):
            if result is not None:
                out.append((conversation.key, result))
                self.stats["chunks"] += result.type == CHUNK_RECORDED
                self.stats["failed"] += result.type != CHUNK_RECORDED
            answered = self.fold.answer(conversation, as_event(result) if result is not None else None)
            out += [(conversation.key, envelope) for envelope in answered]
        self._add("fold", clock)
        await self._publish(conn, out)

    async def _publish(self, conn, events: list[tuple[bytes, Envelope]]) -> None:
        """Into the derived topic, then through the facts projector (rows + its position)."""
        clock = time.perf_counter()
        values = [(key, encode(envelope)) for key, envelope in events]
        offsets = await send_all(self.producer, self.derived.topic, self.derived.partition, values)
        topic, partition = self.derived.topic, self.derived.partition
        records = [ConsumerRecord(topic, partition, offset, -1, 0, key, value, None,
                                  len(key) if key is not None else -1, len(value), ())
                   for offset, (key, value) in zip(offsets, values)]
        clock = self._add("send", clock)
        types = [envelope.type for _, envelope in events]
        for i in range(0, len(records), _CHUNK):
            part, part_types = records[i:i + _CHUNK], types[i:i + _CHUNK]
            await apply_records(conn, self.producer, self.settings, self.projector, part,
                                apply=lambda p=part, t=part_types: self._project(conn, p, t))
            for other in self.others:
                await apply_records(conn, self.producer, self.settings, other, part)
        self._add("project", clock)

    async def _project(self, conn, records: list[ConsumerRecord], types: list[str]) -> list[DeadLetter]:
        """What the facts projector's `apply` does with these records, with the chunks that carry no
        facts inserted in one pipelined `executemany` instead of a statement and a savepoint each
        (no fact reads chunk rows, so inserting them after the chunks with facts changes nothing).
        A batch the database refuses is applied again record by record by `apply_records`."""
        limits = Limits.of(self.settings)
        letters, plain = [], []
        for record, kind in zip(records, types):
            if kind != CHUNK_RECORDED and kind != MEMORY_STORED and kind not in MANAGEMENT_TYPES:
                continue  # requests, failures, skips: the projector decodes them and moves on
            try:
                event = decode(record.value, key=record.key, limits=limits)
            except InvalidEvent:
                continue
            if event.type == CHUNK_RECORDED and not event.payload.facts \
                    and self.projector.chunk_refusal(event) is None:
                plain.append(chunk_row(event))
            elif (letter := await self.projector.apply_event(conn, record, event)) is not None:
                letters.append(letter)
        if plain:
            async with conn.cursor() as cur:
                await cur.executemany(INSERT_CHUNK, plain)
        return letters

    def _hand_over(self) -> None:
        """The chunk fold's states as the processor would have written them (its slice's codec)."""
        self.states.add(FACTS_SLICE, ((c.key, dump_chunks(c.key, c.state)) for c in self.fold.changed()))

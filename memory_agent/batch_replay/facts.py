"""Batch replay of the chunks + facts system for one partition (memory_agent/batch_replay).

The pure chunk fold runs over the history in memory (streams/facts/batch.py); the requests in
flight are answered in waves by the stage's own code (streams/facts/stage.py: the projected
messages, the owner's related facts, the gate and extractor through the LLM cache, the
embeddings through the embedding cache), concurrently up to `llm.concurrency`. Each wave's
events go to the generation's derived topic and are projected at once by the facts
projector's own code with its position, so the next wave's related facts see them, as a
stream replay whose projector keeps up would. Then the final chunk states go to the agent's
table changelog for the hand-over.
"""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from memory_agent.batch_replay.coalesce import coalesce_lookups
from memory_agent.embeddings.factory import make_embedder
from memory_agent.llm.factory import make_json_completer
from memory_agent.settings import Settings
from projections.db import connect, make_pool
from projections.facts import FactsProjector
from projections.runner import apply_records
from schemas.codec import Event, encode
from schemas.envelope import Envelope
from schemas.facts_events import CHUNK_RECORDED
from streams.facts.agent import chunk_config, prompt_and_model
from streams.facts.batch import ChunkHistoryFold, as_event
from streams.facts.extractor import ChunkExtractor
from streams.facts.stage import ChunkStage

log = logging.getLogger(__name__)

_CHUNK = 2000  # derived records per projector transaction


class _BatchStage(ChunkStage):
    """The stage as the agents run it, except that the batch owns each conversation's chain: a
    range an interrupted attempt recorded already is answered again (from the caches), not
    skipped, so the fold can go on; projecting it again changes nothing (ON CONFLICT)."""

    async def _already_recorded(self, cause, request) -> bool:
        return False


async def open_stage(settings: Settings) -> ChunkStage:
    """One stage per batch process (its pool, LLM client and caches serve every partition)."""
    pool = make_pool(settings)
    await pool.open()
    facts = settings.facts
    completer, embedder = make_json_completer(settings), make_embedder(settings)
    coalesce_lookups(completer, embedder)  # a wave's cache lookups in one query each
    return _BatchStage(ChunkExtractor(settings, completer), embedder, pool, inputs_wait_s=facts.inputs_wait_s,
                       max_event_bytes=settings.kafka.max_event_bytes, related_facts=facts.related_facts)


async def close_stage(stage: ChunkStage) -> None:
    await stage.pool.close()
    await stage.embedder.aclose()
    if stage.extractor.completer is not None:
        await stage.extractor.completer.aclose()


class FactsBatch:
    """Chunks and facts of one partition; `stats` counts waves, chunks and failures."""

    def __init__(self, settings: Settings, stage: ChunkStage, producer: AIOKafkaProducer, derived: TopicPartition,
                 changelog: str) -> None:
        self.settings, self.stage, self.producer, self.derived = settings, stage, producer, derived
        self.changelog = changelog
        self.projector = FactsProjector(settings)
        self.fold = ChunkHistoryFold(chunk_config(settings), time.time(), *prompt_and_model(settings))
        self.stats = {"waves": 0, "chunks": 0, "failed": 0}

    async def rebuild(self, records: list[ConsumerRecord], decoded: list) -> None:
        """Run after the partition's messages are projected (the stage reads them)."""
        first: list[tuple[bytes, Envelope]] = []
        for record, event in zip(records, decoded):
            if isinstance(event, Event):
                first += [(record.key, envelope) for envelope in self.fold.add(record.key, event)]
        quiet = logging.getLogger("streams.facts.stage")
        level, quiet.level = quiet.level, max(quiet.getEffectiveLevel(), logging.WARNING)  # not a line per chunk
        try:
            async with await connect(self.settings) as conn:
                await self._publish(conn, first)
                while wave := self.fold.wave():
                    await self._answer(conn, self.stage, wave)
        finally:
            quiet.setLevel(level)
        await self._write_changelog()

    async def _answer(self, conn, stage: ChunkStage, wave) -> None:
        self.stats["waves"] += 1
        limit = asyncio.Semaphore(max(1, self.settings.llm.concurrency))

        async def ask(conversation):
            async with limit:
                return await stage.handle(conversation.asked)

        results = await asyncio.gather(*(ask(c) for c in wave))
        out: list[tuple[bytes, Envelope]] = []
        for conversation, result in zip(wave, results):
            if result is not None:
                out.append((conversation.key, result))
                self.stats["chunks"] += result.type == CHUNK_RECORDED
                self.stats["failed"] += result.type != CHUNK_RECORDED
            answered = self.fold.answer(conversation, as_event(result) if result is not None else None)
            out += [(conversation.key, envelope) for envelope in answered]
        await self._publish(conn, out)

    async def _publish(self, conn, events: list[tuple[bytes, Envelope]]) -> None:
        """Into the derived topic, then through the facts projector (rows + its position)."""
        sent = []
        for key, envelope in events:
            value = encode(envelope)
            future = await self.producer.send(self.derived.topic, value, key=key, partition=self.derived.partition)
            sent.append((key, value, future))
        records = []
        for key, value, future in sent:
            meta = await future
            records.append(ConsumerRecord(meta.topic, meta.partition, meta.offset, meta.timestamp, 0, key, value,
                                          None, len(key), len(value), ()))
        for i in range(0, len(records), _CHUNK):
            await apply_records(conn, self.producer, self.settings, self.projector, records[i:i + _CHUNK])

    async def _write_changelog(self) -> None:
        """The chunk table's entries as the agent would have written them (raw key, JSON state)."""
        futures = [
            await self.producer.send(self.changelog, orjson.dumps(c.state.to_dict()), key=c.key,
                                     partition=self.derived.partition)
            for c in self.fold.changed()
        ]
        await asyncio.gather(*futures)

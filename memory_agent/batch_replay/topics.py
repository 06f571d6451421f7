"""Batch replay of the topic system for one partition (memory_agent/batch_replay).

The topic fold's own shell (`streams/topics_memory/agent.handle`) runs per conversation over the
history in memory, with a fixed wall clock, and every request it makes is answered at once, as
by a stage that answers instantly (the reference semantics of the fold: docs/topics.md):

- the message vectors: the partition's user messages are embedded first, in big batches through
  the embedding cache (a warm replay embeds nothing), and each is handed to the fold with its
  message as the live slice's `prepare` hands it (`stage.embedded_of`: the same normalisation
  and rounding, the same reason for a zero or failed vector; no embedding events, as live);
- `topic.compaction_requested`: answered with a `topic.compacted` whose summary is a placeholder
  unique to the compaction. Nothing in the fold but the summary text depends on that text (the
  topic's `summary` and the next request's `previous_summary` carry it), so the history is
  folded once; then the summaries are written in **waves** (wave k = the k-th compaction of
  every topic, whose previous summary is answer k-1): one cache lookup per wave
  (`cached_many`, when the summarizer has one), the misses to the summarizer concurrently up
  to `llm.concurrency`; then the texts replace the placeholders in the events and the final
  states. A compaction that fails (an LLM error) changes what the fold does next (it backs
  off), so the conversations with one are folded again with the answers known by then;
- `topic.backlog_requested` (only a gap read or a full inbox would ask; instant embeddings
  keep the inbox short): answered by the backlog stage's own code from the projected messages.

Messages an applied erasure covers never reach the fold, as in the processor (streams/topics_memory/slice.py, the
rule of streams/topics_memory/erased.py, its snapshot read once per partition: the batch
applies no erasure meanwhile).

The events go to the generation's derived topic; the rows the topics and topic-lineage projectors
would leave are computed from them in memory and written by one COPY per table with both
projectors' positions, in one transaction (projections/topic_rows.py; the projectors' own code
when the database refuses a row); the final states go to the conversation processor's table
changelog with the slice's codec (sealed when the process seals).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from domain.topics.state import evolve
from memory_agent.batch_replay.produce import send_all
from memory_agent.batch_replay.states import StateRecords
from memory_agent.batch_replay.steps import add_seconds
from core.llm import provenance as llm_provenance
from core.llm.port import ChatMessage, LlmError
from core.settings import Settings
from runtime import isolation
from runtime.db import open_pool
from projections.decoding import records_of
from projections.erasure_reads import PostgresErasureReads
from projections.lineage import _TOPIC_TYPES as LINEAGE_TYPES
from projections.lineage import TopicLineageProjector
from projections import topic_rows
from projections.runner import apply_records, save_offsets
from projections.topics import PROJECTED, TopicsProjector
from schemas import topic_events as te
from schemas.codec import Event, decode, encode, new_event
from schemas.envelope import Envelope, InvalidEvent
from schemas.limits import Limits, check_size
from schemas.sealed import SEALED
from schemas.registry import MESSAGE_APPENDED, REGISTRY
from streams.topics_memory import codec
from streams.topics_memory.agent import PLACED_ROLES, RELEVANT, AgentConfig, Embedded, handle, wants_embedding
from streams.topics_memory.codec import AgentState
from streams.topics_memory.erased import ErasedCheck, ErasureSnapshot, position
from streams.topics_memory.slice import NAME as TOPICS_SLICE
from streams.topics_memory.stage import EmbeddingStage, embed_for_fold, embedded_of
from streams.topics_memory.summarize import TopicSummaryCall

log = logging.getLogger(__name__)

_EMBED_BATCH = 512  # texts per embedding call (one cache lookup each)
_CHUNK = 5000  # derived records per projector transaction
_PLACEHOLDER = "\ue000topic-summary:"  # + topic id and upto_seq: never a real summary


def _same(cause: Envelope) -> dict:
    return dict(tenant_id=cause.tenant_id, conversation_id=cause.conversation_id, user_id=cause.user_id,
                subject_id=cause.subject_id, seq=cause.seq)


def _event(envelope: Envelope) -> Event:
    """An event this process built from a validated model a moment ago: no second validation."""
    return Event(envelope, REGISTRY[envelope.type].payload.model_construct(**envelope.payload))


_PROJECTED = PROJECTED | LINEAGE_TYPES
_ASSIGNED = REGISTRY[te.TOPIC_MESSAGE_ASSIGNED].payload


def projected_events(envelopes: list[Envelope], values: list[tuple[bytes, bytes]], limits: Limits) -> list[Event]:
    """The events the topics and topic-lineage projectors would decode from `values` (the encoded
    `envelopes`, in order), skipping the invalid ones as they do. An assignment (most events: the
    fold's, of a message the log's decode validated, its title from such a message) is not decoded
    again: its payload is validated from the JSON form it was encoded from, as `decode` validates
    it, once its size fits a record (`check_size`, the one rule the fold's input does not settle).
    Every other event, the LLM's texts among them, is decoded from its bytes."""
    events = []
    for envelope, (key, raw) in zip(envelopes, values):
        if envelope.type not in _PROJECTED:
            continue
        if envelope.type == te.TOPIC_MESSAGE_ASSIGNED and SEALED not in envelope.payload:
            try:
                check_size(raw, limits)
                events.append(Event(envelope, _ASSIGNED.model_validate(envelope.payload)))
                continue
            except (InvalidEvent, ValidationError):
                pass  # then as the projectors decode it
        try:
            events.append(decode(raw, key=key, limits=limits))
        except InvalidEvent:
            continue
    return events


@dataclass
class Compaction:
    """One compaction request of the fold and what answers it."""

    key: bytes
    request: Envelope
    placeholder: str
    messages: list[ChatMessage] | None  # None: not all of its messages are in the log
    summary: object | None = None  # TopicSummary, once written
    error: tuple[str, bool] | None = None  # (error, retryable) of a failed one


@dataclass
class _Conversation:
    key: bytes
    tenant_id: str
    conversation_id: str
    events: list[tuple[Event, ConsumerRecord]] = field(default_factory=list)  # what the fold takes, in order
    messages: dict[int, ChatMessage] = field(default_factory=dict)  # seq -> the first message of that seq
    state: AgentState | None = None
    out: list[Envelope] = field(default_factory=list)


class TopicsBatch:
    """The topic system of one partition; `stats` counts what it did (the worker log shows it)."""

    def __init__(self, settings: Settings, embedder, summarizer, producer: AIOKafkaProducer,
                 derived: TopicPartition, states: StateRecords) -> None:
        self.settings, self.producer, self.derived, self.states = settings, producer, derived, states
        self.embedding = EmbeddingStage(embedder)
        self.summarizer = summarizer
        self.config = AgentConfig.from_settings(settings, model=summarizer.model,
                                                prompt_version=summarizer.prompt_version)
        self.wall = time.time()  # fixed: nothing looks stuck while the history is folded
        self.vectors: dict[str, object] = {}  # text -> vector, or its Embedded when its batch failed
        self.resolved: dict[tuple[str, int, int], Compaction] = {}  # (topic, upto, attempt) -> answered
        self.stats = {"messages": 0, "erased": 0, "embedded": 0, "compactions": 0, "summary_hits": 0,
                      "summary_calls": 0, "failed": 0, "waves": 0, "events": 0, "refolded": 0, "unanswered": 0}
        self.seconds: dict[str, float] = {}
        self._texts: dict[str, str] = {}  # placeholder -> the summary's text
        self._summaries: dict[str, object] = {}  # placeholder -> the TopicSummary
        self.rederived: dict[tuple[str, str], str] = {}  # (tenant, conversation) -> erasure id
        self._pool = None
        self._backlog = None

    def _add(self, step: str, since: float) -> float:
        return add_seconds(self.seconds, step, since)

    async def rebuild(self, records: list[ConsumerRecord], decoded: list) -> None:
        """Run after the partition's messages are projected (a backlog read reads them)."""
        clock = time.perf_counter()
        try:
            conversations = await self._gather(records, decoded)
            clock = self._add("gather", clock)
            await self.derive(conversations)
            clock = time.perf_counter()
            await self._publish(conversations)
            clock = self._add("publish", clock)
            self.states.add(TOPICS_SLICE, ((c.key, codec.dumps(c.state, c.key)) for c in conversations
                                           if c.state is not None and c.state != codec.loads(None, c.conversation_id)))
            self._add("changelog", clock)
        finally:
            if self._pool is not None:
                await self._pool.close()

    async def derive(self, conversations: list[_Conversation]) -> None:
        """Fold, answer and patch: each conversation's events and final state (no I/O but the
        embedder's and the summarizer's)."""
        clock = time.perf_counter()
        await self._embed(conversations)
        clock = self._add("embed", clock)
        compactions: list[Compaction] = []
        for conversation in conversations:
            compactions += await self._fold(conversation)
        clock = self._add("fold", clock)
        await self._summarize(compactions)
        clock = self._add("summaries", clock)
        failed = {c.key for c in compactions if c.error is not None}
        for conversation in conversations:
            if conversation.key in failed:  # what the fold does next depends on the failure
                self.stats["refolded"] += 1
                await self._fold(conversation, known=True)
            self._patch(conversation)
        self._add("patch", clock)

    async def _gather(self, records: list[ConsumerRecord], decoded: list) -> list[_Conversation]:
        """The events the fold takes, per conversation in log order; a message an applied erasure
        covers is left out, as the processor leaves it out (streams/topics_memory/slice.py)."""
        reads = PostgresErasureReads(self.settings)
        check = ErasedCheck(reads)
        try:
            snapshot: ErasureSnapshot = await check._current("", -1)  # noqa: SLF001 - the shell's own read
            # Per mixed conversation, the newest erasure that asks for its topics to be derived again.
            self.rederived = await reads.rederive_requests()
        finally:
            await check.close()
        conversations: dict[bytes, _Conversation] = {}
        for record, event in zip(records, decoded):
            if not isinstance(event, Event) or event.type not in RELEVANT:
                continue
            e = event.envelope
            conversation = conversations.get(record.key)
            if conversation is None:
                conversation = conversations[record.key] = _Conversation(record.key, e.tenant_id, e.conversation_id)
            if event.type == MESSAGE_APPENDED and event.payload.role in PLACED_ROLES:
                if snapshot.erasure_of(e.tenant_id, e.conversation_id, e.user_id, position(record)) is not None:
                    self.stats["erased"] += 1
                    continue
                conversation.messages.setdefault(e.seq, ChatMessage(e.seq, event.payload.role, event.payload.content))
                self.stats["messages"] += 1
            conversation.events.append((event, record))
        return list(conversations.values())

    async def _embed(self, conversations: list[_Conversation]) -> None:
        """Every user message's text, in big batches through the embedder (and its cache)."""
        texts = list(dict.fromkeys(
            event.payload.content for c in conversations for event, _ in c.events
            if event.type == MESSAGE_APPENDED and event.payload.role == "user"))
        for i in range(0, len(texts), _EMBED_BATCH):
            part = texts[i:i + _EMBED_BATCH]
            try:
                vectors = await self.embedding.embedder.embed_documents(part)
            except Exception as exc:  # noqa: BLE001 - then each text as the live slice embeds it
                log.warning("batch replay: embedding %d topic messages failed (%s); one by one", len(part), exc)
                for text in part:  # an outage is waited out, a bad text placed unmatched
                    self.vectors[text] = await embed_for_fold(self.embedding.embedder, text, what="a message")
                continue
            self.vectors.update(zip(part, vectors))
            self.stats["embedded"] += len(part)

    def _embedded_input(self, event: Event) -> Embedded:
        """The message's embedding as the live slice's `prepare` gives it to the fold."""
        found = self.vectors[event.payload.content]
        return found if isinstance(found, Embedded) else embedded_of(found)

    async def _fold(self, conversation: _Conversation, known: bool = False) -> list[Compaction]:
        """The shell over the conversation's history, every request answered at once; returns its
        compactions (answered with placeholders, or, `known`, with the answers written since)."""
        state = codec.loads(None, conversation.conversation_id)
        out: list[Envelope] = []
        compactions: list[Compaction] = []
        for event, _ in conversation.events:
            queue = deque([event])
            while queue:
                event = queue.popleft()
                embedded = self._embedded_input(event) if wants_embedding(state, event) else None
                state, outgoing = handle(self.config, state, event, self.wall, embedded)
                out += outgoing
                for envelope in outgoing:
                    answers = await self._answer(conversation, envelope, compactions, known)
                    out += answers
                    queue.extend(_event(answer) for answer in answers)
        rederive = self.rederived.get((conversation.tenant_id, conversation.conversation_id))
        if rederive is not None:
            # The erased user's messages never reached this fold: its topics are already derived from
            # the messages that remain, and the rows it writes come after the erasure's deletes. The
            # re-derivation the worker asks for after the hand-over would derive them again over
            # these rows (new topic ids, the messages' rows kept by the old ones): taken as done.
            state = evolve(state, last_rederive=rederive)
        conversation.state, conversation.out = state, out
        return compactions

    async def _answer(self, conversation: _Conversation, request: Envelope, compactions: list[Compaction],
                      known: bool) -> list[Envelope]:
        if request.type == te.TOPIC_EMBEDDING_REQUESTED:
            return [await self._embedded(_event(request))]
        if request.type == te.TOPIC_COMPACTION_REQUESTED:
            answer = self._compacted(conversation, request, compactions, known)
            return [answer] if answer is not None else []
        if request.type == te.TOPIC_BACKLOG_REQUESTED:
            return await (await self._backlog_stage()).handle(_event(request))
        return []

    async def _embedded(self, request: Event) -> Envelope:
        """A request of the fold's older path (the fold is given every vector up front, so only a
        state that held a message without one asks): answered by the stage's own code."""
        return (await self.embedding.handle([request]))[0]

    def _compacted(self, conversation: _Conversation, request: Envelope, compactions: list[Compaction],
                   known: bool) -> Envelope | None:
        p = request.payload
        ident = (p["topic_id"], p["upto_seq"], p["attempt"])
        if known:
            done = self.resolved.pop(ident, None)
            if done is None:  # asked again after a failure: left in flight, the live fold re-asks it
                self.stats["unanswered"] += 1
                return None
            compaction = Compaction(conversation.key, request, done.placeholder, done.messages, done.summary,
                                    done.error)
        else:
            seqs = sorted(set(p["seqs"]))
            found = [conversation.messages[seq] for seq in seqs if seq in conversation.messages]
            compaction = Compaction(conversation.key, request, f"{_PLACEHOLDER}{p['topic_id']}:{p['upto_seq']}",
                                    found if len(found) == len(seqs) else None)
            if compaction.messages is None:  # the stage waits for them, then fails
                compaction.error = (f"InputsNotReady: {len(found)}/{len(p['seqs'])} messages projected", True)
        compactions.append(compaction)
        if compaction.error is not None:
            payload = te.TopicCompactionFailed(topic_id=p["topic_id"], upto_seq=p["upto_seq"], attempt=p["attempt"],
                                               error=compaction.error[0][:2000], retryable=compaction.error[1])
            return new_event(te.TOPIC_COMPACTION_FAILED, payload, **_same(request))
        payload = te.TopicCompacted(
            topic_id=p["topic_id"], upto_seq=p["upto_seq"], archived_seqs=p["seqs"], summary=compaction.placeholder,
            attempt=p["attempt"], prompt_version=self.summarizer.prompt_version, model=self.summarizer.model,
            generation_time_ms=0)
        return new_event(te.TOPIC_COMPACTED, payload, **_same(request))

    async def _summarize(self, compactions: list[Compaction]) -> None:
        """The summaries in waves: wave k writes the k-th compaction of every topic."""
        chains: dict[tuple[bytes, str], list[Compaction]] = {}
        for compaction in compactions:
            chains.setdefault((compaction.key, compaction.request.payload["topic_id"]), []).append(compaction)
        texts = self._texts
        limit = asyncio.Semaphore(max(1, self.settings.llm.concurrency))
        cached_many = getattr(self.summarizer, "cached_many", None)  # the cached topic summarizer's
        waves = max((len(chain) for chain in chains.values()), default=0)
        for k in range(waves):
            self.stats["waves"] += 1
            wave: list[tuple[Compaction, str | None]] = []
            for chain in chains.values():
                if k >= len(chain) or any(c.error is not None for c in chain[:k]):
                    continue  # after a failure the fold asks for no more (it backs off)
                compaction = chain[k]
                if compaction.error is not None:
                    continue
                previous = compaction.request.payload["previous_summary"]
                wave.append((compaction, texts.get(previous, previous) if previous is not None else None))
            calls = [(c.request.payload["title"], previous, c.messages, c.request.payload["upto_seq"])
                     for c, previous in wave]
            found: list = [None] * len(wave)
            if cached_many is not None and calls:
                found = await cached_many([TopicSummaryCall(*call) for call in calls])
            self.stats["summary_hits"] += sum(summary is not None for summary in found)

            async def ask(call, request: Envelope):
                async with limit:
                    with llm_provenance.serving([_event(request)]):  # the cache entry names its conversation
                        return await self.summarizer.summarize(*call)

            missing = [i for i, summary in enumerate(found) if summary is None]
            self.stats["summary_calls"] += len(missing)
            answers = await asyncio.gather(*(ask(calls[i], wave[i][0].request) for i in missing),
                                           return_exceptions=True)
            for i, answer in zip(missing, answers):
                if isinstance(answer, LlmError):
                    wave[i][0].error = (f"{type(answer).__name__}: {answer}", getattr(answer, "retryable", True))
                elif isinstance(answer, BaseException):
                    raise answer
                else:
                    found[i] = answer
            for (compaction, _), summary in zip(wave, found):
                if summary is not None:
                    compaction.summary = summary
                    texts[compaction.placeholder] = summary.text
                    self._summaries[compaction.placeholder] = summary
        for compaction in compactions:
            p = compaction.request.payload
            self.resolved[(p["topic_id"], p["upto_seq"], p["attempt"])] = compaction
            self.stats["compactions"] += compaction.summary is not None
            self.stats["failed"] += compaction.error is not None

    def _patch(self, conversation: _Conversation) -> None:
        """The summaries' texts in place of the placeholders: events and final state."""
        texts = self._texts
        out = []
        for envelope in conversation.out:
            p = envelope.payload
            if envelope.type == te.TOPIC_COMPACTION_REQUESTED and p.get("previous_summary") in texts:
                previous = texts[p["previous_summary"]]
                envelope = envelope.model_copy(update={"payload": p | {"previous_summary": previous}})
            elif envelope.type == te.TOPIC_COMPACTED and p["summary"] in texts:
                summary = self._summaries[p["summary"]]
                envelope = envelope.model_copy(update={"payload": p | {
                    "summary": summary.text, "model": summary.model, "prompt_version": summary.prompt_version}})
            out.append(envelope)
        conversation.out = out
        state = conversation.state
        changes = {}
        for name in ("topics", "draining"):  # the working set, and evicted topics still compacting
            before = getattr(state.topics, name, None)
            if before is None:
                continue
            after = tuple(evolve(t, summary=texts[t.summary]) if t.summary in texts else t for t in before)
            if any(a is not b for a, b in zip(after, before)):
                changes[name] = after
        if changes:
            conversation.state = evolve(state, topics=evolve(state.topics, **changes))
        self.stats["events"] += len(out)

    async def _publish(self, conversations: list[_Conversation]) -> None:
        """Into the derived topic, then the topics and topic-lineage projectors' rows (docs/replay.md)."""
        clock = time.perf_counter()
        values = [(c.key, encode(envelope)) for c in conversations for envelope in c.out]
        clock = self._add("publish.encode", clock)
        offsets = await send_all(self.producer, self.derived.topic, self.derived.partition, values)
        clock = self._add("publish.send", clock)
        topic, partition = self.derived.topic, self.derived.partition
        records = [ConsumerRecord(topic, partition, offset, -1, 0, key, value, None,
                                  len(key) if key is not None else -1, len(value), ())
                   for offset, (key, value) in zip(offsets, values)]
        from runtime.db import connect  # noqa: PLC0415

        envelopes = [envelope for c in conversations for envelope in c.out]
        events = projected_events(envelopes, values, Limits.of(self.settings))
        clock = self._add("publish.decode", clock)
        async with await connect(self.settings) as conn:
            try:
                # The rows both projectors would leave, computed in memory and copied, one COPY per
                # table, with both projectors' positions: one transaction for the partition.
                async with conn.transaction():
                    rows = await topic_rows.rows_of(conn, events)
                    clock = self._add("publish.rows", clock)
                    sent = await topic_rows.copy(conn, rows, [(c.tenant_id, c.conversation_id)
                                                              for c in conversations])
                    for projector in (TopicsProjector, TopicLineageProjector):
                        await save_offsets(conn, projector.name, records)
                self.stats["rows"] = sum(sent.values())
                self._add("publish.copy", clock)
                return
            except Exception as exc:  # noqa: BLE001 - a row the database refuses: the projectors sort it out
                if not isolation.is_record_error(exc):
                    raise
                log.warning("batch replay: copying the topic rows failed (%s); projecting event by event",
                            isolation.describe(exc))
            # The projectors' own per-event code, a chunk's rows and position in one transaction
            # (`apply_records` applies a chunk the database refuses again record by record).
            decoded = {record.offset: event for record, event in
                       records_of(records, PROJECTED | LINEAGE_TYPES, Limits.of(self.settings))}
            for projector in (TopicsProjector(self.settings), TopicLineageProjector(self.settings)):
                for i in range(0, len(records), _CHUNK):
                    chunk = records[i:i + _CHUNK]
                    events = [decoded[record.offset] for record in chunk if record.offset in decoded]
                    await apply_records(conn, self.producer, self.settings, projector, chunk,
                                        apply=lambda p=projector, e=events: p.apply_events(conn, e))
                clock = self._add(f"publish.{projector.name}", clock)

    async def _backlog_stage(self):
        if self._backlog is None:
            from projections.topic_reads import PostgresBacklogReads  # noqa: PLC0415
            from streams.topics_memory.recall import BacklogStage  # noqa: PLC0415

            self._pool = await open_pool(self.settings)
            self._backlog = BacklogStage(self.embedding.embedder, PostgresBacklogReads(self._pool))
        return self._backlog

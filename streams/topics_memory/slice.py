"""Topic memory (seed 004) as a slice: the topic fold, the message vector it is given, recall and compaction."""

from __future__ import annotations

import logging

from core.embeddings.factory import make_embedder
from schemas import topic_events as te
from schemas.codec import new_event
from schemas.envelope import parse_conversation_key
from schemas.erasure_events import REDERIVE_REQUESTED
from schemas.registry import MESSAGE_APPENDED
from schemas.sealed import open_state
from streams.context import StreamContext
from streams.slice import Slice, Ticks
from streams.stages import Lazy, Stage, one_by_one
from streams.topics_memory import codec
from streams.topics_memory.agent import (
    PLACED_ROLES, RELEVANT, AgentConfig, Embedded, handle, needs_tick, wants_embedding,
)
from streams.topics_memory.erased import ErasedCheck, ReplayBarrier
from streams.topics_memory.recall import BacklogStage
from streams.topics_memory.stage import CompactionStage, EmbeddingStage, Warmed, embed_for_fold
from streams.topics_memory.summarize import make_topic_summarizer

log = logging.getLogger(__name__)
NAME = "topics"


def load(key: bytes, raw: bytes | None) -> codec.AgentState:
    """The stored state (a state sealed by an erased key: afresh)."""
    conversation = parse_conversation_key(key)
    return codec.loads(open_state(key, raw), conversation[1] if conversation else "")


def dump(key: bytes, state: codec.AgentState) -> bytes:
    return codec.dumps(state, key)  # sealed when this process seals


def make_slice(ctx: StreamContext) -> Slice:
    settings = ctx.settings
    summarizer = make_topic_summarizer(settings)
    config = AgentConfig.from_settings(settings, model=summarizer.model, prompt_version=summarizer.prompt_version)
    # The local ONNX model already uses every core per call: one caller, batched, is fastest.
    embed_concurrency = 1 if settings.embedding.provider == "local" else settings.embedding.concurrency
    erased_check = Lazy(lambda: _erased_check(ctx))
    probed = [False]  # this batch's erasure probe was sent (erased.py, "One probe per processor batch")

    def begin() -> None:
        probed[0] = False

    async def admit(event, record) -> bool:
        """The message race: a message an erasure already covers must not come back (erased.py)."""
        if event.type == REDERIVE_REQUESTED:  # a stream replay's is moot: nothing to derive again (erased.py)
            return not await (await erased_check.get()).moot_rederive(event.payload.erasure_event_id)
        if event.type != MESSAGE_APPENDED or event.payload.role not in PLACED_ROLES:
            return True
        erasure = await (await erased_check.get()).erasure_of(event, record, probe=not probed[0])
        probed[0] = True
        if erasure is not None:
            log.info("topic fold: %s seq %d is covered by erasure %s; left out",
                     event.envelope.conversation_id, event.envelope.seq, erasure)
        return erasure is None

    embedder = Lazy(_async(lambda: make_embedder(settings)))  # one model for everything that embeds

    warmed = Warmed()

    async def warm(items) -> None:
        """The batch's user messages embedded in one call (one cache statement, one model call
        for the misses) before the processor folds them one by one."""
        await warmed.fill(await embedder.get(), [event for _, state, event in items if wants_embedding(state, event)])

    async def prepare(state, event) -> Embedded | None:
        """A user message's vector before the fold needs it: no request/answer pair through the log."""
        if not wants_embedding(state, event):
            return None
        found = warmed.take(event)
        if found is not None:
            return found
        e = event.envelope
        return await embed_for_fold(await embedder.get(), event.payload.content,
                                    what=f"message {e.conversation_id}/{e.seq}")

    def fold(state, event, now: float, embedded: Embedded | None = None):
        return handle(config, state, event, now, embedded)

    def due(states, wall: float):
        """A request that never came back is re-issued by the fold when it sees a tick."""
        out = []
        for key, state in states:
            if needs_tick(state, wall, config):
                tenant, conversation_id = parse_conversation_key(key)
                out.append((key, new_event(te.TOPIC_TICKED, te.TopicTicked(), tenant_id=tenant,
                                           conversation_id=conversation_id, user_id="system")))
        return out

    embedding_stage = Lazy(lambda: _embedding_stage(embedder))
    compaction_stage = Lazy(lambda: _compaction_stage(summarizer, ctx))
    backlog_stage = Lazy(lambda: _backlog_stage(embedder, ctx))

    async def embed(requests):
        """Requests of an older log or of a state saved before the fold embedded up front
        (`prepare`): a batch of them, one embedding call, results back."""
        return await (await embedding_stage.get()).handle(requests)

    async def compact(event):
        """Concurrent: LLM latency never holds up the fold; results go back to the same partition."""
        return await (await compaction_stage.get()).handle(event)

    async def recall(requests):
        """Deferred messages back from the projected log, embedded in one call, in order."""
        stage = await backlog_stage.get()
        return [envelope for request in requests for envelope in await stage.handle(request)]

    stages = [
        Stage("recall-topic-backlog", frozenset({te.TOPIC_BACKLOG_REQUESTED}), recall),
        Stage("embed-topic-messages", frozenset({te.TOPIC_EMBEDDING_REQUESTED}), embed,
              concurrency=embed_concurrency, batch_size=settings.embedding.batch_size),
        Stage("compact-topics", frozenset({te.TOPIC_COMPACTION_REQUESTED}), one_by_one(compact),
              concurrency=settings.llm.concurrency),
    ]
    interval = max(1.0, min(settings.topics.embedding_timeout_s, settings.topics.compaction_timeout_s) / 4)
    return Slice(NAME, RELEVANT, load, dump, fold, stages, ticks=[Ticks(interval, due)], admit=admit,
                 prepare=prepare, warm=warm, begin=begin)


def _async(build):
    async def built():
        return build()
    return built


async def _embedding_stage(embedder: Lazy) -> EmbeddingStage:
    return EmbeddingStage(await embedder.get())


async def _backlog_stage(embedder: Lazy, ctx: StreamContext) -> BacklogStage:
    return BacklogStage(await embedder.get(), await ctx.reads("backlog_reads"))


async def _erased_check(ctx: StreamContext) -> ErasedCheck:
    settings = ctx.settings
    replay = settings.replay_until is not None and settings.replay_mode == "stream"
    return ErasedCheck(await ctx.reads("erasure_reads"), barrier=ReplayBarrier(settings) if replay else None)


async def _compaction_stage(summarizer, ctx: StreamContext) -> CompactionStage:
    if ctx.ports.topic_reads is None:
        raise RuntimeError("no topic reads wired: make_app(ports=StreamPorts(topic_reads=...)) (memory_agent/worker.py)")
    return CompactionStage(summarizer, ctx.ports.topic_reads(await ctx.pool()))

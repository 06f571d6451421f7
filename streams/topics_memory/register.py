"""Faust wiring of the topic memory (seed 004): ordered fold, embedding and compaction stages, timer."""

from __future__ import annotations

import logging
import time

import faust

from core.embeddings.factory import make_embedder
from schemas import topic_events as te
from schemas.codec import encode, new_event
from schemas.envelope import parse_conversation_key
from schemas.erasure_events import REDERIVE_REQUESTED
from schemas.registry import MESSAGE_APPENDED
from streams.context import StreamContext
from streams.stages import Lazy, Stage, one_by_one
from streams.topics_memory import codec
from streams.topics_memory.agent import PLACED_ROLES, RELEVANT, AgentConfig, handle, needs_tick
from streams.topics_memory.erased import ErasedCheck, ReplayBarrier, connector
from streams.topics_memory.recall import BacklogStage
from streams.topics_memory.stage import CompactionStage, EmbeddingStage
from streams.topics_memory.summarize import make_topic_summarizer

log = logging.getLogger(__name__)


def register(app: faust.App, ctx: StreamContext) -> None:
    settings = ctx.settings
    raw_bytes = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    # key_type/value_type bytes make the changelog recovery decode raw too (not JSON).
    states = app.Table("topic-state", default=None, partitions=settings.kafka.partitions, schema=raw_bytes,
                       key_type=bytes, value_type=bytes)
    summarizer = make_topic_summarizer(settings)
    config = AgentConfig.from_settings(settings, model=summarizer.model, prompt_version=summarizer.prompt_version)
    decoded = codec.DecodedCache(capacity=4096)
    # The local ONNX model already uses every core per call: one caller, batched, is fastest.
    embed_concurrency = 1 if settings.embedding.provider == "local" else settings.embedding.concurrency
    erased_check = Lazy(lambda: _erased_check(ctx))

    @app.agent(ctx.conversation_and_memory_events, name="fold-topics", concurrency=1)
    async def fold_topics(stream):
        """Ordered per conversation: events out first, then the state (a crash in between
        re-sends on redelivery instead of losing them)."""
        async for key, value in stream.items():
            event = ctx.decode_if(value, RELEVANT, key=key)
            if event is None:
                continue
            if event.type == REDERIVE_REQUESTED and await (await erased_check.get()).moot_rederive(
                    event.payload.erasure_event_id):  # a stream replay's: nothing to derive again (erased.py)
                continue
            if event.type == MESSAGE_APPENDED and event.payload.role in PLACED_ROLES:
                record = stream.current_event.message
                erasure = await (await erased_check.get()).erasure_of(event, record)
                if erasure is not None:  # the message race: its text must not come back (erased.py)
                    log.info("topic fold: %s seq %d is covered by erasure %s; left out",
                             event.envelope.conversation_id, event.envelope.seq, erasure)
                    continue
            async with ctx.applying(stream, "fold-topics"):
                raw_state = states.get(key)
                state = decoded.get(key, raw_state, event.envelope.conversation_id)
                new_state, outgoing = handle(config, state, event, time.time())
                for envelope in outgoing:
                    await ctx.memory_events.send(key=key, value=encode(envelope))
                if new_state != state:
                    raw = codec.dumps(new_state, key)
                    states[key] = raw
                    decoded.put(key, raw, new_state)

    embedder = Lazy(_async(lambda: make_embedder(settings)))  # one model for both stages that embed
    embedding_stage = Lazy(lambda: _embedding_stage(embedder))
    compaction_stage = Lazy(lambda: _compaction_stage(summarizer, ctx))
    backlog_stage = Lazy(lambda: _backlog_stage(embedder, ctx))

    async def embed(requests):
        """Concurrent with the fold: a batch of requests, one embedding call, results back."""
        return await (await embedding_stage.get()).handle(requests)

    async def compact(event):
        """Concurrent: LLM latency never holds up the fold; results go back to the same partition."""
        return await (await compaction_stage.get()).handle(event)

    async def recall(requests):
        """Deferred messages back from the projected log, embedded in one call, in order."""
        stage = await backlog_stage.get()
        return [envelope for request in requests for envelope in await stage.handle(request)]

    ctx.stages.append(Stage("recall-topic-backlog", frozenset({te.TOPIC_BACKLOG_REQUESTED}), recall))
    ctx.stages.append(Stage("embed-topic-messages", frozenset({te.TOPIC_EMBEDDING_REQUESTED}), embed,
                            concurrency=embed_concurrency, batch_size=settings.embedding.batch_size))
    ctx.stages.append(Stage("compact-topics", frozenset({te.TOPIC_COMPACTION_REQUESTED}), one_by_one(compact),
                            concurrency=settings.llm.concurrency))

    interval = max(1.0, min(settings.topics.embedding_timeout_s, settings.topics.compaction_timeout_s) / 4)

    @app.timer(interval=interval)
    async def tick_stuck_topics():
        """A request that never came back is re-issued by the fold when it sees a tick."""
        wall = time.time()
        for key, raw_state in list(states.items()):
            conversation = parse_conversation_key(key)
            if conversation is None:
                continue  # not a conversation's state (a bad key from before keys were checked)
            if raw_state and needs_tick(decoded.get(key, raw_state, ""), wall, config):
                tenant, conversation_id = conversation
                tick = new_event(te.TOPIC_TICKED, te.TopicTicked(), tenant_id=tenant, conversation_id=conversation_id,
                                 user_id="system")
                await ctx.memory_events.send(key=key, value=encode(tick))


def _async(build):
    async def built():
        return build()
    return built


async def _embedding_stage(embedder: Lazy) -> EmbeddingStage:
    return EmbeddingStage(await embedder.get())


async def _backlog_stage(embedder: Lazy, ctx: StreamContext) -> BacklogStage:
    return BacklogStage(await embedder.get(), await ctx.pool())


async def _erased_check(ctx: StreamContext) -> ErasedCheck:
    settings = ctx.settings
    replay = settings.replay_until is not None and settings.replay_mode == "stream"
    return ErasedCheck(connector(settings), barrier=ReplayBarrier(settings) if replay else None)


async def _compaction_stage(summarizer, ctx: StreamContext) -> CompactionStage:
    return CompactionStage(summarizer, await ctx.pool())

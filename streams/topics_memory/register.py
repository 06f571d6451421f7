"""Faust wiring of the topic memory (seed 004): ordered fold, embedding and compaction stages, timer."""

from __future__ import annotations

import asyncio
import logging
import time

import faust

from memory_agent.embeddings.factory import make_embedder
from schemas import topic_events as te
from schemas.codec import encode, new_event
from streams.context import StreamContext
from streams.topics_memory import codec
from streams.topics_memory.agent import RELEVANT, AgentConfig, event_type, handle, needs_tick
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
    stages: dict[str, object] = {}
    stage_lock = asyncio.Lock()
    decoded = codec.DecodedCache(capacity=4096)
    # The local ONNX model already uses every core per call: one caller, batched, is fastest.
    embed_concurrency = 1 if settings.embedding.provider == "local" else settings.embedding.concurrency

    def wanted(value: bytes, types: frozenset[str] | set[str]):
        kind = event_type(value)
        if kind is not None and kind not in types:
            return None
        event = ctx.decode(value)
        return event if event is not None and event.type in types else None

    @app.agent(ctx.conversation_and_memory_events, name="fold-topics", concurrency=1)
    async def fold_topics(stream):
        """Ordered per conversation: events out first, then the state (a crash in between
        re-sends on redelivery instead of losing them)."""
        async for key, value in stream.items():
            event = wanted(value, RELEVANT)
            if event is None:
                continue
            raw_state = states.get(key)
            state = decoded.get(key, raw_state, event.envelope.conversation_id)
            new_state, outgoing = handle(config, state, event, time.time())
            for envelope in outgoing:
                await ctx.memory_events.send(key=key, value=encode(envelope))
            if new_state != state:
                raw = codec.dumps(new_state)
                states[key] = raw
                decoded.put(key, raw, new_state)

    @app.agent(ctx.memory_events, name="embed-topic-messages", concurrency=embed_concurrency)
    async def embed_topic_messages(stream):
        """Concurrent with the fold: a batch of requests, one embedding call, results back."""
        async for events in stream.take_events(settings.embedding.batch_size, within=0.02):
            requests = [e for e in (wanted(ev.value, {te.TOPIC_EMBEDDING_REQUESTED}) for ev in events) if e]
            if not requests:
                continue
            if "embed" not in stages:
                stages["embed"] = EmbeddingStage(make_embedder(settings))
            for envelope in await stages["embed"].handle(requests):
                await ctx.memory_events.send(key=envelope.key, value=encode(envelope))

    @app.agent(ctx.memory_events, name="compact-topics", concurrency=settings.llm.concurrency)
    async def compact_topics(stream):
        """Concurrent: LLM latency never holds up the fold; results go back to the same partition."""
        async for key, value in stream.items():
            event = wanted(value, {te.TOPIC_COMPACTION_REQUESTED})
            if event is None:
                continue
            async with stage_lock:  # eight actors start at once: build the stage (and pool) once
                if "compact" not in stages:
                    stages["compact"] = CompactionStage(summarizer, await ctx.pool())
            result = await stages["compact"].handle(event)
            if result is not None:
                await ctx.memory_events.send(key=key, value=encode(result))

    interval = max(1.0, min(settings.topics.embedding_timeout_s, settings.topics.compaction_timeout_s) / 4)

    @app.timer(interval=interval)
    async def tick_stuck_topics():
        """A request that never came back is re-issued by the fold when it sees a tick."""
        wall = time.time()
        for key, raw_state in list(states.items()):
            if raw_state and needs_tick(decoded.get(key, raw_state, ""), wall, config):
                tenant, _, conversation = key.decode().partition("/")
                tick = new_event(te.TOPIC_TICKED, te.TopicTicked(), tenant_id=tenant, conversation_id=conversation,
                                 user_id="system")
                await ctx.memory_events.send(key=key, value=encode(tick))

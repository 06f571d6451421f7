"""Faust wiring of chunks and facts: ordered chunk fold, concurrent extraction stage, tick timer."""

from __future__ import annotations

import time

import faust
import orjson

from core.embeddings.factory import make_embedder
from runtime.llm_factory import make_json_completer
from schemas.codec import encode
from schemas.envelope import parse_conversation_key
from schemas.facts_events import CHUNK_REQUESTED
from streams.context import StreamContext
from streams.facts.agent import (
    CHUNK_TABLE,
    EXTRACT_STAGE,
    chunk_config,
    fold_event,
    needs_tick,
    prompt_and_model,
    tick_event,
)
from streams.facts.chunking import ChunkState
from streams.facts.extractor import ChunkExtractor
from streams.facts import state_codec
from streams.facts.stage import ChunkStage
from streams.stages import Lazy, Stage, one_by_one


def register(app: faust.App, ctx: StreamContext) -> None:
    settings = ctx.settings
    raw_bytes = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    # key_type/value_type bytes make the changelog recovery decode raw too (not JSON).
    chunks = app.Table(
        CHUNK_TABLE, default=None, partitions=settings.kafka.partitions, schema=raw_bytes,
        key_type=bytes, value_type=bytes,
    )
    config = chunk_config(settings)
    prompt_version, model = prompt_and_model(settings)

    @app.agent(ctx.conversation_and_memory_events, name="fold-chunks", concurrency=1)
    async def fold_chunks(stream):
        """Ordered per conversation: one state read, one fold step, one state write per event."""
        async for key, value in stream.items():
            event = ctx.decode(value, key=key)
            if event is None:
                continue
            async with ctx.applying(stream, "fold-chunks"):
                state = state_codec.loads(key, chunks.get(key))
                new_state, outgoing = fold_event(config, state, event, time.time(), prompt_version, model)
                if new_state != state:
                    chunks[key] = state_codec.dumps(key, new_state)  # its error text sealed when sealing
                for envelope in outgoing:
                    await ctx.memory_events.send(key=key, value=encode(envelope))

    async def build_stage() -> ChunkStage:
        extractor = ChunkExtractor(settings, make_json_completer(settings))
        return ChunkStage(extractor, make_embedder(settings), await ctx.pool(),
                          inputs_wait_s=settings.facts.inputs_wait_s, max_event_bytes=settings.kafka.max_event_bytes,
                          related_facts=settings.facts.related_facts)

    stage = Lazy(build_stage)

    async def extract(event):
        """Concurrent: gate, extractor and embeddings never hold up the fold."""
        return await (await stage.get()).handle(event)

    ctx.stages.append(Stage(EXTRACT_STAGE, frozenset({CHUNK_REQUESTED}), one_by_one(extract),
                            concurrency=settings.llm.concurrency))

    @app.timer(interval=max(1.0, min(settings.facts.request_timeout_s, settings.facts.failure_backoff_s or 1.0) / 4))
    async def tick_due_chunks():
        """Timed-out requests and backed-off retries are re-issued by the fold when it sees a tick."""
        now = time.time()
        for key, raw_state in list(chunks.items()):
            conversation = parse_conversation_key(key)
            if conversation is None or raw_state is None:
                continue  # not a conversation's state (a bad key from before keys were checked)
            if needs_tick(ChunkState.from_dict(orjson.loads(raw_state)), now, config):
                await ctx.memory_events.send(key=key, value=encode(tick_event(*conversation)))

"""Chunks and facts (seeds 003, 001) as a slice: the chunk fold, the extraction stage, its ticks."""

from __future__ import annotations

from core.embeddings.factory import make_embedder
from runtime.llm_factory import make_json_completer
from schemas import facts_events as fe
from schemas.envelope import parse_conversation_key
from schemas.registry import MESSAGE_APPENDED
from streams.context import StreamContext
from streams.facts import state_codec
from streams.facts.agent import EXTRACT_STAGE, chunk_config, fold_event, needs_tick, prompt_and_model, tick_event
from streams.facts.extractor import ChunkExtractor
from streams.facts.stage import ChunkStage
from streams.slice import Slice, Ticks
from streams.stages import Lazy, Stage, one_by_one

NAME = "facts"
RELEVANT = frozenset({MESSAGE_APPENDED, fe.CHUNK_RECORDED, fe.CHUNK_FAILED, fe.CHUNK_TICKED})


def dump(key: bytes, state) -> bytes:
    return state_codec.dumps(key, state)  # its error text sealed when sealing


def make_slice(ctx: StreamContext) -> Slice:
    settings = ctx.settings
    config = chunk_config(settings)
    prompt_version, model = prompt_and_model(settings)

    def fold(state, event, now: float):
        return fold_event(config, state, event, now, prompt_version, model)

    def due(states, now: float):
        """Timed-out requests and backed-off retries are re-issued by the fold when it sees a tick."""
        return [(key, tick_event(*parse_conversation_key(key))) for key, state in states
                if needs_tick(state, now, config)]

    async def build_stage() -> ChunkStage:
        extractor = ChunkExtractor(settings, make_json_completer(settings))
        return ChunkStage(extractor, make_embedder(settings), await ctx.reads("chunk_reads"),
                          inputs_wait_s=settings.facts.inputs_wait_s, max_event_bytes=settings.kafka.max_event_bytes,
                          related_facts=settings.facts.related_facts, concurrency=settings.llm.concurrency)

    stage = Lazy(build_stage)

    async def extract(event):
        """Concurrent: gate, extractor and embeddings never hold up the fold."""
        return await (await stage.get()).handle(event)

    # Slots for the ranges asked for ahead too: they wait for their conversation's turn in the
    # stage (ChunkStage.turns), which bounds the extractions at the LLM's concurrency.
    stages = [Stage(EXTRACT_STAGE, frozenset({fe.CHUNK_REQUESTED}), one_by_one(extract),
                    concurrency=settings.llm.concurrency * (1 + settings.facts.max_ahead))]
    interval = max(1.0, min(settings.facts.request_timeout_s, settings.facts.failure_backoff_s or 1.0) / 4)
    return Slice(NAME, RELEVANT, state_codec.loads, dump, fold, stages, ticks=[Ticks(interval, due)])

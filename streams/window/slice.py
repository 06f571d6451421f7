"""The sliding-window summary memory (seeds 000, 002) as a slice of the conversation processor."""

from __future__ import annotations

import orjson

from core import metrics
from runtime.llm_factory import make_summarizer
from schemas.envelope import parse_conversation_key
from schemas.erasure_events import REDERIVE_REQUESTED
from schemas.registry import MESSAGE_APPENDED, SUMMARY_COMPLETED, SUMMARY_FAILED, SUMMARY_REQUESTED, WINDOW_TICKED
from streams.context import StreamContext
from streams.slice import Slice, Ticks
from streams.stages import Lazy, Stage, one_by_one
from streams.window.agent import SUMMARY_STAGE, fold_event, looks_due, looks_stuck, tick_event, window_config
from domain.window.fold import WindowState
from streams.window.summarize import SummaryStage

NAME = "window"
RELEVANT = frozenset({MESSAGE_APPENDED, SUMMARY_COMPLETED, SUMMARY_FAILED, WINDOW_TICKED, REDERIVE_REQUESTED})


def load(key: bytes, raw: bytes | None) -> WindowState:
    return WindowState.from_dict(orjson.loads(raw)) if raw else WindowState()


def dump(key: bytes, state: WindowState) -> bytes:
    return orjson.dumps(state.to_dict())


def make_slice(ctx: StreamContext) -> Slice:
    settings = ctx.settings
    summarizer = make_summarizer(settings)
    config = window_config(settings, summarizer)

    def fold(state: WindowState, event, now: float):
        return fold_event(config, state, event, now, settings.replay_until)

    def due(states, now: float):
        """A request that never came back is re-issued by the fold when it sees a tick; a
        backlog left by failures is caught up once their backoff is over."""
        out, in_flight = [], 0
        for key, state in states:
            in_flight += state.in_flight is not None
            if looks_stuck(state, now, config) or looks_due(state, now, config):
                out.append((key, tick_event(*parse_conversation_key(key), "system")))
        metrics.WINDOWS_AWAITING_SUMMARY.set(in_flight)
        return out

    stage = Lazy(lambda: _summary_stage(summarizer, ctx))

    async def summarize(event):
        """Concurrent: LLM latency never holds up the fold; results go back to the same partition."""
        return await (await stage.get()).handle(event)

    stages = [Stage(SUMMARY_STAGE, frozenset({SUMMARY_REQUESTED}), one_by_one(summarize),
                    concurrency=settings.llm.concurrency)]
    return Slice(NAME, RELEVANT, load, dump, fold, stages,
                 ticks=[Ticks(max(1.0, settings.window.request_timeout_s / 4), due)])


async def _summary_stage(summarizer, ctx: StreamContext) -> SummaryStage:
    if ctx.ports.window_reads is None:
        raise RuntimeError("no window reads wired: make_app(ports=StreamPorts(window_reads=...)) (memory_agent/worker.py)")
    # A request waits for a base still being computed up to the fold's own request timeout
    # (after it, the fold issues the request again).
    return SummaryStage(summarizer, ctx.ports.window_reads(await ctx.pool()),
                        max_wait_s=ctx.settings.window.request_timeout_s)


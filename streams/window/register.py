"""Faust wiring of the sliding-window summary memory (seeds 000, 002)."""

from __future__ import annotations

import logging
import time

import faust
import orjson

from core import metrics
from runtime.llm_factory import make_summarizer
from runtime.outage import is_transient
from schemas.codec import encode
from schemas.envelope import parse_conversation_key
from schemas.registry import SUMMARY_REQUESTED
from streams.context import StreamContext
from streams.stages import Lazy, Stage, one_by_one
from streams.window.agent import (
    SUMMARY_STAGE,
    WINDOW_TABLE,
    fold_event,
    looks_due,
    looks_stuck,
    tick_event,
    window_config,
)
from streams.window.fold import WindowState
from streams.window.summarize import SummaryStage

log = logging.getLogger(__name__)


def register(app: faust.App, ctx: StreamContext) -> None:
    settings = ctx.settings
    raw_bytes = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    # key_type/value_type bytes make the changelog recovery decode raw too (not JSON).
    windows = app.Table(
        WINDOW_TABLE, default=None, partitions=settings.kafka.partitions, schema=raw_bytes,
        key_type=bytes, value_type=bytes,
    )
    summarizer = make_summarizer(settings)
    config = window_config(settings, summarizer)
    # Decoded states by key, valid while the table still holds the very bytes they came
    # from (a recovery or another writer stores new bytes objects).
    decoded: dict[bytes, tuple[bytes, WindowState]] = {}

    def load(key: bytes) -> WindowState:
        raw = windows.get(key)
        if raw is None:
            return WindowState()
        cached = decoded.get(key)
        if cached is not None and cached[0] is raw:
            return cached[1]
        state = WindowState.from_dict(orjson.loads(raw))
        decoded[key] = (raw, state)
        return state

    @app.agent(ctx.conversation_and_memory_events, name="fold-windows", concurrency=1)
    async def fold_windows(stream):
        """Ordered per conversation: one state read, one fold step, one state write per event."""
        async for key, value in stream.items():
            event = ctx.decode(value, key=key)
            if event is None:
                continue
            async with ctx.applying(stream, "fold-windows"):
                state = load(key)
                new_state, outgoing = fold_event(config, state, event, time.time(), settings.replay_until)
                if new_state != state:
                    raw = orjson.dumps(new_state.to_dict())
                    windows[key] = raw
                    decoded[key] = (raw, new_state)
                for envelope in outgoing:
                    await ctx.memory_events.send(key=key, value=encode(envelope))

    stage = Lazy(lambda: _summary_stage(summarizer, ctx))

    async def summarize(event):
        """Concurrent: LLM latency never holds up the fold; results go back to the same partition."""
        return await (await stage.get()).handle(event)

    ctx.stages.append(Stage(SUMMARY_STAGE, frozenset({SUMMARY_REQUESTED}), one_by_one(summarize),
                            concurrency=settings.llm.concurrency))

    @app.timer(interval=max(1.0, settings.window.request_timeout_s / 4))
    async def tick_stuck_windows():
        """A request that never came back is re-issued by the fold when it sees a tick; a
        backlog left by failures is caught up once their backoff is over."""
        now = time.time()
        in_flight = 0
        try:
            for key, raw_state in list(windows.items()):
                conversation = parse_conversation_key(key)
                if conversation is None or raw_state is None:
                    continue  # not a conversation's state (a bad key from before keys were checked)
                state = WindowState.from_dict(orjson.loads(raw_state))
                in_flight += state.in_flight is not None
                if looks_stuck(state, now, config) or looks_due(state, now, config):
                    await ctx.memory_events.send(key=key, value=encode(tick_event(*conversation, "system")))
        except Exception as exc:  # the broker is away: the next tick sends them again
            if not is_transient(exc):
                raise
            log.warning("window ticks not sent (%s); retrying at the next tick", exc)
        metrics.WINDOWS_AWAITING_SUMMARY.set(in_flight)


async def _summary_stage(summarizer, ctx: StreamContext) -> SummaryStage:
    return SummaryStage(summarizer, await ctx.pool())

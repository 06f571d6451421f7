"""The faust app of one generation: window fold agent, summary stage, stuck-request timer."""

from __future__ import annotations

import logging
import time

import faust
import orjson

from memory_agent import metrics
from memory_agent.llm.factory import make_summarizer
from memory_agent.settings import Settings
from projections.db import make_pool
from schemas.codec import decode, encode
from schemas.envelope import InvalidEvent
from schemas.registry import SUMMARY_REQUESTED
from streams.window.agent import fold_event, looks_stuck, tick_event, window_config
from streams.window.fold import WindowState
from streams.window.summarize import SummaryStage

log = logging.getLogger(__name__)


def make_app(settings: Settings) -> faust.App:
    """Build the app; agents, tables and topics are named from the settings (prefix, generation)."""
    kafka = settings.kafka
    (settings.state_dir / "faust").mkdir(parents=True, exist_ok=True)
    app = faust.App(
        f"{kafka.topic_prefix}.{settings.generation}.streams",
        broker=";".join(f"kafka://{server}" for server in kafka.bootstrap_servers.split(",")),
        store="memory://",  # tables are rebuilt from their changelog topics on start
        topic_partitions=kafka.partitions,
        topic_replication_factor=kafka.replication_factor,
        datadir=str(settings.state_dir / "faust"),
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        processing_guarantee="at_least_once",
        broker_commit_every=100,
        broker_commit_interval=1.0,
    )
    conversation_events = app.topic(kafka.conversation_topic, key_serializer="raw", value_serializer="raw")
    memory_topic_name = kafka.memory_topic(settings.generation)
    memory_events = app.topic(memory_topic_name, key_serializer="raw", value_serializer="raw")
    both = app.topic(kafka.conversation_topic, memory_topic_name, key_serializer="raw", value_serializer="raw")
    raw_bytes = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    # key_type/value_type bytes make the changelog recovery decode raw too (not JSON).
    windows = app.Table(
        "window-state", default=None, partitions=kafka.partitions, schema=raw_bytes, key_type=bytes, value_type=bytes
    )
    summarizer = make_summarizer(settings)
    config = window_config(settings, summarizer)
    resources: dict = {}

    def decoded(value: bytes):
        try:
            return decode(value, max_event_bytes=kafka.max_event_bytes,
                          max_content_chars=settings.limits.max_content_chars)
        except InvalidEvent:
            return None  # the messages projector dead-letters it with the reason

    @app.agent(both, name="fold-windows", concurrency=1)
    async def fold_windows(stream):
        """Ordered per conversation: one state read, one fold step, one state write per event."""
        async for key, value in stream.items():
            event = decoded(value)
            if event is None:
                continue
            raw_state = windows.get(key)
            state = WindowState.from_dict(orjson.loads(raw_state)) if raw_state else WindowState()
            new_state, outgoing = fold_event(config, state, event, time.time())
            if new_state != state:
                windows[key] = orjson.dumps(new_state.to_dict())
            for envelope in outgoing:
                await memory_events.send(key=key, value=encode(envelope))

    @app.agent(memory_events, name="summarize-windows", concurrency=settings.llm.concurrency)
    async def summarize_windows(stream):
        """Concurrent: LLM latency never holds up the fold; results go back to the same partition."""
        async for key, value in stream.items():
            event = decoded(value)
            if event is None or event.type != SUMMARY_REQUESTED:
                continue
            result = await (await _stage()).handle(event)
            if result is not None:
                await memory_events.send(key=key, value=encode(result))

    async def _stage() -> SummaryStage:
        if "stage" not in resources:
            pool = make_pool(settings)
            await pool.open()
            resources["stage"] = SummaryStage(summarizer, pool)
        return resources["stage"]

    @app.timer(interval=max(1.0, settings.window.request_timeout_s / 4))
    async def tick_stuck_windows():
        """A request that never came back is re-issued by the fold when it sees a tick."""
        now = time.time()
        in_flight = 0
        for key, raw_state in list(windows.items()):
            state = WindowState.from_dict(orjson.loads(raw_state))
            in_flight += state.in_flight is not None
            if looks_stuck(state, now, config):
                tenant, _, conversation = key.decode().partition("/")
                await memory_events.send(key=key, value=encode(tick_event(tenant, conversation, "system")))
        metrics.WINDOWS_AWAITING_SUMMARY.set(in_flight)

    app.conversation_events = conversation_events  # for tests and tools
    return app

"""The faust app of one generation: the conversation processor with every enabled memory system as a slice."""

from __future__ import annotations

import faust

from core.settings import Settings
from streams import kafka_transport
from streams.context import StreamContext, StreamPorts
from streams import processor, rederive
from streams.facts import slice as facts
from streams.stages import StageRunner, run_stages
from runtime.kafka_topics import agents_group, stage_group, stages_group
from streams.topics_memory import slice as topics
from streams.window import slice as window

# Registering a memory system: its slice here (streams/slice.py). The processor runs them in this order.
SLICES = {"window": window.make_slice, "facts": facts.make_slice, "topics": topics.make_slice}


def make_app(settings: Settings, *, stages: bool = True, ports: StreamPorts | None = None) -> faust.App:
    """Build the app; agents, tables and topics are named from the settings (prefix, generation).
    `stages=False`: the stage runners are built (`app.stage_runners`) but not run by the app
    (`memory-agent worker --role agents`, with the stages in `--role stages` processes).
    `ports`: the read model's implementations the stages read through (the roof wires them)."""
    kafka = settings.kafka
    (settings.state_dir / "faust").mkdir(parents=True, exist_ok=True)
    app = faust.App(
        agents_group(settings),
        broker=";".join(f"{kafka_transport.SCHEME}://{server}" for server in kafka.bootstrap_servers.split(",")),
        store="memory://",  # tables are rebuilt from their changelog topics on start
        topic_partitions=kafka.partitions,
        topic_replication_factor=kafka.replication_factor,
        datadir=str(settings.state_dir / "faust"),
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        processing_guarantee="at_least_once",
        # Commit on the 1 s timer, not every N events: faust commits inside its fetch loop,
        # so a small N stalls delivery (measured: message -> fold p50 94 ms at N=100, 69 ms
        # without). Redelivery after a crash is harmless: every effect is idempotent.
        broker_commit_every=10_000,
        broker_commit_interval=1.0,
        # On a rebalance faust waits for every event taken to be acked; an agent's last event is
        # acked only when it takes the next one, which the paused rebalance never gives: with two
        # workers the survivor of a SIGKILL waited forever (tests/integration/test_two_workers.py).
        # Not waiting is safe: only acked offsets are committed, an unacked event is redelivered
        # to the partition's new owner and every effect is idempotent.
        stream_wait_empty=False,
        # A SIGKILLed worker's members stay in the group until their session times out, and a
        # restarted worker waits in "(Re-)joining group" until then: faust's default is 60 s.
        # faust heartbeats from its consumer thread, so a busy event loop does not expire it.
        broker_session_timeout=kafka.session_timeout_s,
        broker_heartbeat_interval=min(3.0, kafka.session_timeout_s / 4),
        stream_buffer_maxsize=kafka.stream_buffer_maxsize,
        consumer_max_fetch_size=kafka.stream_max_fetch_bytes,
    )
    app.fetch_max_wait_ms = kafka.fetch_max_wait_ms
    app.idle_fetch_max_wait_ms = kafka.idle_fetch_max_wait_ms
    memory_topic = kafka.memory_topic(settings.generation)
    ctx = StreamContext(
        settings=settings,
        conversation_events=app.topic(kafka.conversation_topic, key_serializer="raw", value_serializer="raw"),
        memory_events=app.topic(memory_topic, key_serializer="raw", value_serializer="raw"),
        conversation_and_memory_events=app.topic(
            kafka.conversation_topic, memory_topic, key_serializer="raw", value_serializer="raw"
        ),
        dead_letters=app.topic(kafka.dead_letter_topic, key_serializer="raw", value_serializer="raw"),
        ports=ports or StreamPorts(),
    )
    slices = [SLICES[system](ctx) for system in SLICES if system in settings.systems]
    if slices:
        processor.register(app, ctx, slices)
    rederive.register(app, ctx)  # after an erasure: mixed summaries and chunks again (docs/lineage.md)
    runners = [
        StageRunner(  # one consumer for every stage (streams/stages.py)
            ctx.stages, topic=memory_topic, group_id=stages_group(settings),
            legacy_groups=[stage_group(settings, stage.name) for stage in ctx.stages],
            bootstrap_servers=kafka.bootstrap_servers, decode_if=ctx.decode_if, fetch_max_wait_ms=kafka.fetch_max_wait_ms,
            dead_letter_topic=kafka.dead_letter_topic, max_dead_letter_bytes=kafka.max_dead_letter_bytes,
            session_timeout_s=kafka.session_timeout_s, idle_fetch_max_wait_ms=kafka.idle_fetch_max_wait_ms,
            limits=ctx.limits,
        )
    ] if ctx.stages else []

    if stages:
        @app.task
        async def run_the_stages() -> None:
            """The systems' concurrent stages, on plain aiokafka (streams/stages.py)."""
            await run_stages(runners)

    app.stage_runners = runners
    return app

"""The faust app of one generation: every memory system registers its agents on it."""

from __future__ import annotations

import faust

from memory_agent.settings import Settings
from streams.context import StreamContext
from streams.facts import register as facts
from streams.topics_memory import register as topics
from streams.window import register as window

REGISTRARS = {"window": window.register, "facts": facts.register, "topics": topics.register}


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
    memory_topic = kafka.memory_topic(settings.generation)
    ctx = StreamContext(
        settings=settings,
        conversation_events=app.topic(kafka.conversation_topic, key_serializer="raw", value_serializer="raw"),
        memory_events=app.topic(memory_topic, key_serializer="raw", value_serializer="raw"),
        conversation_and_memory_events=app.topic(
            kafka.conversation_topic, memory_topic, key_serializer="raw", value_serializer="raw"
        ),
    )
    for system in settings.systems:
        REGISTRARS[system](app, ctx)
    return app

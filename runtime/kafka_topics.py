"""The Kafka topics of a deployment (names, specs, consumer group names) and their creation.

Named kafka_topics, not topics: "topic" alone means seed 004's memory topics (docs/topics.md).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from domain.lineage import served_topic
from core.settings import Settings

log = logging.getLogger(__name__)
FOREVER = "-1"
THIRTY_DAYS_MS = str(30 * 24 * 3600 * 1000)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """The log is the truth, so conversation and memory events are kept forever."""
    kafka = settings.kafka
    keep = {"retention.ms": FOREVER, "retention.bytes": FOREVER}
    return [
        TopicSpec(kafka.conversation_topic, kafka.partitions, keep),
        # Co-partitioned with the conversation topic: the window agent reads both.
        TopicSpec(kafka.memory_topic(settings.generation), kafka.partitions, keep),
        TopicSpec(kafka.dead_letter_topic, kafka.partitions, {"retention.ms": THIRTY_DAYS_MS}),
        TopicSpec(served_topic(settings), kafka.partitions, keep),  # what each turn was served (docs/lineage.md)
    ]


def agents_group(settings: Settings) -> str:
    """The faust app id of a generation: its agents' consumer group and table-topic prefix."""
    return f"{settings.kafka.topic_prefix}.{settings.generation}.streams"


def stage_group(settings: Settings, stage: str) -> str:
    """The consumer group one concurrent stage had before the stages shared one (streams/stages.py
    reads its offsets once; the batch replay hands over through it)."""
    return f"{agents_group(settings)}.stage.{stage}"


def stages_group(settings: Settings) -> str:
    """The consumer group all concurrent stages of a generation share (streams/stages.py)."""
    return f"{agents_group(settings)}.stages"


def changelog_topic(settings: Settings, table: str) -> str:
    """A faust table's changelog topic, as faust names it (tests check it still does)."""
    return f"{agents_group(settings)}-{table}-changelog"


def changelog_specs(app) -> list[TopicSpec]:
    """The faust app's table changelogs, created up front: faust creating them itself races
    its own metadata refresh and can crash an agent with PartitionsMismatch(0 partitions)."""
    return [
        TopicSpec(table.changelog_topic.get_topic_name(), table.partitions, {"cleanup.policy": "compact"})
        for table in app.tables.values()
    ]


async def _wait_for_leaders(admin: AIOKafkaAdminClient, names: list[str], timeout_s: float = 30.0) -> None:
    """New partitions need an elected leader before producers can use them without retries."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        described = await admin.describe_topics(names)
        if all(t["error_code"] == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
               for t in described):
            return
        await asyncio.sleep(0.1)
    log.warning("topics %s still have partitions without a leader after %ss", names, timeout_s)


async def ensure_topics(
    settings: Settings, specs: list[TopicSpec] | None = None, admin: AIOKafkaAdminClient | None = None
) -> list[str]:
    """Create missing topics; return the names created. Existing ones are left alone. A started
    `admin` client is used as it is (and left open); without one, a client lives for the call."""
    specs = specs if specs is not None else topic_specs(settings)
    if admin is not None:
        return await _create_missing(admin, settings, specs)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        return await _create_missing(admin, settings, specs)
    finally:
        await admin.close()


async def _create_missing(admin: AIOKafkaAdminClient, settings: Settings, specs: list[TopicSpec]) -> list[str]:
    existing = set(await admin.list_topics())
    missing = [s for s in specs if s.name not in existing]
    if missing:
        try:
            await admin.create_topics(
                [NewTopic(s.name, s.partitions, settings.kafka.replication_factor, topic_configs=s.config) for s in missing]
            )
        except TopicAlreadyExistsError:
            pass  # created concurrently by another process
        log.info("created topics %s", [s.name for s in missing])
        await _wait_for_leaders(admin, [s.name for s in missing])
    return [s.name for s in missing]

"""Replay: build a new generation from the start of the log beside the live one, and watch it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from domain.secrets import split_overrides, with_secrets_from
from memory_agent.batch_replay import BATCH_SYSTEMS, BatchReplayError, check_batchable
from memory_agent.settings import Settings
from projections import generations
from projections.migrate import migrate
from streams.kafka_topics import agents_group, ensure_topics


def generation_settings(settings: Settings, name: str, replay_until: datetime | None = None) -> Settings:
    return settings.model_copy(update={"generation": name, "replay_until": replay_until})


def env_for(settings: Settings, overrides: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ) | overrides
    env["MEMORY_GENERATION"] = settings.generation
    if settings.replay_until is not None:
        env["MEMORY_REPLAY_UNTIL"] = settings.replay_until.isoformat()
        env["MEMORY_REPLAY_MODE"] = settings.replay_mode
    return env


def parse_overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    """`llm.summary_prompt_version=summary-v2` -> MEMORY_LLM__SUMMARY_PROMPT_VERSION=summary-v2."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set wants key=value, got {pair!r}")
        env["MEMORY_" + key.replace(".", "__").upper()] = value
    return env


def pid_file(settings: Settings, name: str) -> Path:
    return settings.state_dir / "replays" / f"{settings.kafka.topic_prefix}.{name}.pid"


MODES = ("auto", "batch", "stream")


def choose_mode(replay: Settings, mode: str) -> str:
    """"auto": batch when every system of the generation has one (window, facts), else stream."""
    if mode not in MODES:
        raise ValueError(f"replay mode must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        return "batch" if set(replay.systems) <= BATCH_SYSTEMS else "stream"
    if mode == "batch":
        check_batchable(replay)
    return mode


async def start_replay(
    settings: Settings, name: str, overrides: dict[str, str], mode: str = "auto"
) -> tuple[Path, str]:
    """Migrate the new schema, create its topics, record it, and start its worker (detached).
    Returns the worker's log and the mode chosen."""
    replay = generation_settings(Settings(**_with_env(overrides)), name, replay_until=datetime.now(UTC))
    try:
        mode = choose_mode(replay, mode)
    except BatchReplayError as exc:
        raise ValueError(str(exc)) from None
    replay = replay.model_copy(update={"replay_mode": mode})
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        existing = {g.name for g in generations.list_generations(conn, settings.kafka.topic_prefix)}
        schema_taken = conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (f"gen_{name}",)).fetchone()[0]
    if name in existing or schema_taken:
        raise generations.GenerationError(
            f"generation {name!r} (schema gen_{name}) exists; drop it first or pick another name"
        )
    await asyncio.to_thread(migrate, replay)
    await ensure_topics(replay)
    public_overrides, secret_names = split_overrides(overrides)
    config = {
        "summary_prompt_version": replay.llm.summary_prompt_version,
        "chunk_facts_prompt_version": replay.llm.chunk_facts_prompt_version,
        "llm_provider": replay.llm.provider,
        "llm_model": replay.llm.model,
        "embedding_model": replay.embedding.model,
        "replay_mode": mode,
        # Which projectors its worker runs: `progress` waits for each of them (not only for
        # those that have stored a position).
        "systems": list(replay.systems),
        "index_messages": replay.retrieval.index_messages,
        # Secrets (API keys, DSNs...) are recorded by name only; `replay resume` reads them
        # from the environment again (domain/secrets.py).
        "overrides": public_overrides,
        "secret_overrides": secret_names,
    }
    with psycopg.connect(settings.postgres.dsn) as conn:
        generations.record_replay(conn, settings.kafka.topic_prefix, name, config, replay.replay_until)
    return _spawn_worker(settings, replay, overrides), mode


def resume_replay(settings: Settings, name: str) -> tuple[Path, str]:
    """Start the worker of a replay generation again, with the settings it was started with
    (its worker died, or the machine restarted). A batch replay goes on with the partitions
    it had not handed over; a stream replay from its committed offsets."""
    with psycopg.connect(settings.postgres.dsn) as conn:
        generation = generations.get_generation(conn, settings.kafka.topic_prefix, name)
    if generation.replay_until is None:
        raise generations.GenerationError(f"generation {name!r} was not built by `replay start`")
    if worker_running(settings, name):
        raise generations.GenerationError(f"the worker of {name!r} is running (pid file {pid_file(settings, name)})")
    overrides, missing = with_secrets_from(dict(os.environ), generation.config)
    if missing:
        raise generations.GenerationError(
            f"generation {name!r} was started with secret setting(s) {', '.join(missing)}, which are not stored:"
            " set them in the environment and resume again"
        )
    mode = generation.config.get("replay_mode", "stream")
    replay = generation_settings(Settings(**_with_env(overrides)), name, replay_until=generation.replay_until)
    return _spawn_worker(settings, replay.model_copy(update={"replay_mode": mode}), overrides), mode


def worker_running(settings: Settings, name: str) -> bool:
    path = pid_file(settings, name)
    if not path.exists():
        return False
    try:
        pid = int(path.read_text())
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError):
        return False
    try:  # a killed worker not yet reaped by its parent is a zombie: not running
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _spawn_worker(settings: Settings, replay: Settings, overrides: dict[str, str]) -> Path:
    log_dir = settings.state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    path = pid_file(settings, replay.generation)
    path.parent.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"replay-{replay.generation}.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "memory_agent.cli", "worker"],
            env=env_for(replay, overrides), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    path.write_text(str(process.pid))
    return log_path


def _with_env(overrides: dict[str, str]) -> dict:
    """Settings as the environment plus the overrides would build them."""
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        return Settings().model_dump()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def stop_worker(settings: Settings, name: str) -> bool:
    path = pid_file(settings, name)
    if not path.exists():
        return False
    pid = int(path.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    path.unlink()
    return True


@dataclass(frozen=True)
class Progress:
    generation: str
    total: int  # events in the conversation log
    projected: int  # of them applied by the slowest of the generation's projectors that read it
    folded: int  # of them committed by the generation's stream agents
    derived_total: int  # events in the generation's memory topic
    derived_projected: int  # of them applied by the slowest of its projectors that read it
    # Records still ahead of each part that is not caught up ("agents": the stream agents on
    # the log; a projector: both topics it reads). Empty when caught up.
    behind: dict[str, int] = field(default_factory=dict)
    messages_projected: int = 0  # log events the messages projector alone applied (what reads see)

    @property
    def processed(self) -> int:
        return min(self.projected, self.folded)

    @property
    def caught_up(self) -> bool:
        return self.processed >= self.total and self.derived_projected >= self.derived_total

    def as_dict(self) -> dict:
        return {**vars(self), "processed": self.processed, "caught_up": self.caught_up}


async def progress(settings: Settings, name: str) -> Progress:
    """Where a generation stands against the end of the log (Kafka end offsets vs. its positions).

    Every projector the generation's worker runs counts, including one that has stored no
    position yet (it stands at 0): a generation is not caught up while any of them is behind."""
    kafka = settings.kafka
    source, derived = kafka.conversation_topic, kafka.memory_topic(name)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    await consumer.start()
    await admin.start()
    try:
        ends = {}
        for topic in (source, derived):
            partitions = consumer.partitions_for_topic(topic) or set()
            if not partitions:
                await consumer._client.force_metadata_update()  # noqa: SLF001 - fresh topic
                partitions = consumer.partitions_for_topic(topic) or set()
            ends.update(await consumer.end_offsets([TopicPartition(topic, p) for p in partitions]))
        committed = await admin.list_consumer_group_offsets(agents_group(generation_settings(settings, name)))
    finally:
        await consumer.stop()
        await admin.close()
    stored, expected = await asyncio.to_thread(_positions_and_projectors, settings, name)
    total = sum(o for tp, o in ends.items() if tp.topic == source)
    folded = sum(m.offset for tp, m in committed.items() if tp.topic == source and m.offset >= 0)
    return Progress(
        generation=name,
        total=total,
        projected=slowest(stored, expected, ends, source),
        folded=folded,
        derived_total=sum(o for tp, o in ends.items() if tp.topic == derived),
        derived_projected=slowest(stored, expected, ends, derived),
        behind={k: v for k, v in {"agents": max(0, total - folded), **behind(stored, expected, ends)}.items() if v > 0},
        messages_projected=slowest(stored, {"messages": [source]}, ends, source),
    )


def behind(stored: dict[str, dict[TopicPartition, int]], expected: dict[str, list[str]],
           ends: dict[TopicPartition, int]) -> dict[str, int]:
    """Records each expected projector has still to apply, over the topics it reads."""
    return {p: sum(max(0, end - stored.get(p, {}).get(tp, 0)) for tp, end in ends.items() if tp.topic in topics)
            for p, topics in expected.items()}


def slowest(stored: dict[str, dict[TopicPartition, int]], expected: dict[str, list[str]],
            ends: dict[TopicPartition, int], topic: str) -> int:
    """Records of `topic` (up to its end) that every projector reading it has applied: the
    expected projectors, at 0 where they stored nothing. (A position stored by a projector the
    worker no longer runs does not count: it would never move.)"""
    readers = {p for p, topics in expected.items() if topic in topics}
    partitions = [tp for tp in ends if tp.topic == topic]
    totals = [sum(min(stored.get(p, {}).get(tp, 0), ends[tp]) for tp in partitions) for p in readers]
    return min(totals, default=sum(ends[tp] for tp in partitions))


def expected_projectors(settings: Settings, name: str, config: dict) -> dict[str, list[str]]:
    """The projectors a worker of generation `name` runs, and the topics each reads. A replay
    generation records its systems; for another (the first one) the given settings say."""
    from memory_agent.worker import projectors  # the worker wires them; imported on use

    update: dict = {"generation": name}
    if "systems" in config:
        update["systems"] = config["systems"]
    if "index_messages" in config:
        update["retrieval"] = settings.retrieval.model_copy(update={"index_messages": config["index_messages"]})
    generation = settings.model_copy(update=update)
    return {p.name: list(p.topics(generation)) for p in projectors(generation)}


def _positions_and_projectors(
    settings: Settings, name: str
) -> tuple[dict[str, dict[TopicPartition, int]], dict[str, list[str]]]:
    stored: dict[str, dict[TopicPartition, int]] = {}
    with psycopg.connect(settings.postgres.dsn) as conn:
        try:
            rows = conn.execute(
                psycopg.sql.SQL("SELECT projector, topic, partition, next_offset FROM {}.projector_offsets").format(
                    psycopg.sql.Identifier(f"gen_{name}")
                )
            ).fetchall()
        except psycopg.errors.UndefinedTable:
            rows = []
            conn.rollback()
        try:
            config = generations.get_generation(conn, settings.kafka.topic_prefix, name).config
        except generations.GenerationError:
            config = {}
    for projector, topic, partition, offset in rows:
        stored.setdefault(projector, {})[TopicPartition(topic, partition)] = offset
    return stored, expected_projectors(settings, name, config)


async def drop_generation_topics(settings: Settings, name: str) -> list[str]:
    """The generation's derived topic and its agents' changelog/internal topics."""
    prefixes = (settings.kafka.memory_topic(name), f"{settings.kafka.topic_prefix}.{name}.streams-")
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    await admin.start()
    try:
        doomed = [t for t in await admin.list_topics() if t.startswith(prefixes)]
        if doomed:
            await admin.delete_topics(doomed)
        return doomed
    finally:
        await admin.close()

"""Replay: build a new generation from the start of the log beside the live one, and watch it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from aiokafka.admin import AIOKafkaAdminClient

from domain.secrets import split_overrides, with_secrets_from
from memory_agent.batch_replay import BATCH_SYSTEMS, BatchReplayError, check_batchable
from core.settings import Settings
from runtime.judge import settings_with
from projections import generations
from projections.migrate import migrate
from projections.progress import (  # noqa: F401 - re-exported: `replay status`, tests
    Progress,
    behind,
    expected_projectors,
    generation_settings,
    progress,
    slowest,
)
from runtime.kafka_topics import ensure_topics


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
        # The local model's graph of the new (empty) generation's vectors (docs/llm-and-embeddings.md).
        "embedding_integer_matmul": replay.embedding.integer_matmul,
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
    return settings_with(Settings(), overrides).model_dump()


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

"""Per-test isolation on the shared real stack: unique topics, generation schema and API keys."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest
import uvicorn
from aiokafka.admin import AIOKafkaAdminClient

from api.app import create_app
from core import privacy
from core.settings import ApiSettings, KafkaSettings, PostgresSettings, PrivacySettings, Settings
from memory_agent.worker import run_projectors
from projections.migrate import migrate
from runtime.kafka_topics import ensure_topics

# Service keys that may name any user of their tenant (X-User-Id); tests/integration/test_auth.py
# covers user-bound keys and the narrower scopes.
API_KEYS = {"key-a": {"tenant": "tenant-a", "act_as": "any_user"}, "key-b": {"tenant": "tenant-b", "act_as": "any_user"}}


def make_settings(stack, **overrides) -> Settings:
    uid = uuid.uuid4().hex[:10]
    fields = dict(
        environment="test",
        generation=f"t{uid}",
        kafka=KafkaSettings(bootstrap_servers=stack.kafka_bootstrap, topic_prefix=f"test-{uid}", partitions=4),
        postgres=PostgresSettings(dsn=stack.postgres_dsn),
        api=ApiSettings(api_keys=API_KEYS),
    )
    fields.update(overrides)
    return Settings(**fields)


@pytest.fixture(scope="session")
async def kafka_admin(stack) -> AsyncIterator[AIOKafkaAdminClient]:
    """One admin client for every test's topics (a client per test cost a connection each)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@pytest.fixture
async def settings(stack, kafka_admin) -> AsyncIterator[Settings]:
    settings = make_settings(stack)
    privacy.install(settings)  # this test's sealing (MEMORY_PRIVACY__ENCRYPT_CONTENT=true runs the suite sealed)
    await asyncio.to_thread(migrate, settings)
    await ensure_topics(settings, admin=kafka_admin)
    yield settings
    await drop_everything(settings, kafka_admin)


SEALING = pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])


def sealed_variant(settings: Settings, sealed: bool) -> Settings:
    """`settings` with sealing (docs/lineage.md, crypto-shredding) on or off for this test, its
    API and its worker processes (`worker_process` passes it on)."""
    settings = settings.model_copy(update={"privacy": PrivacySettings(encrypt_content=sealed)})
    privacy.install(settings)
    return settings


async def drop_everything(settings: Settings, admin: AIOKafkaAdminClient | None = None) -> None:
    """Drops the test's generation schemas (one statement) and rows, then its topics."""
    with contextlib.suppress(Exception):
        async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
            # This generation and the replays a test built beside it (named after it).
            cur = await conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname = %s OR nspname LIKE %s",
                (settings.pg_schema, settings.pg_schema + "\\_%"),
            )
            schemas = [psycopg.sql.Identifier(schema) for (schema,) in await cur.fetchall()]
            if schemas:
                await conn.execute(
                    psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(psycopg.sql.SQL(", ").join(schemas))
                )
            await conn.execute(
                "DELETE FROM public.memory_generations WHERE topic_prefix = %s", (settings.kafka.topic_prefix,)
            )
    async with contextlib.AsyncExitStack() as own:
        if admin is None:
            admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
            await admin.start()
            own.push_async_callback(admin.close)
        ours = [t for t in await admin.list_topics() if t.startswith(settings.kafka.topic_prefix + ".")]
        if ours:
            with contextlib.suppress(Exception):
                await admin.delete_topics(ours)


@contextlib.asynccontextmanager
async def running_projectors(settings: Settings) -> AsyncIterator[asyncio.Task]:
    stop = asyncio.Event()
    task = asyncio.create_task(run_projectors(settings, stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def running_api(settings: Settings, app=None) -> AsyncIterator[str]:
    """The real API over real HTTP on a free loopback port (`app`: this one, made by create_app);
    yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app if app is not None else create_app(settings), host="127.0.0.1",
                                           port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def side_by_side(*commands: Awaitable, limit: int = 4) -> list:
    """Awaits independent commands (typically CLI child processes, whose cost is mostly their
    imports) concurrently, at most `limit` at a time (below a tenant's API connection share, so
    none is refused with a 429); results in the order given."""
    slots = asyncio.Semaphore(limit)

    async def one(command: Awaitable):
        async with slots:
            return await command

    return await asyncio.gather(*(one(command) for command in commands))


async def scalar(settings: Settings, sql: str, params=()) -> object:
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
        return row[0] if row else None


def settings_env(settings: Settings) -> dict[str, str]:
    """Environment variables that make a child process build the same settings."""
    import json
    import os

    env = dict(os.environ)
    env.update(
        MEMORY_ENVIRONMENT=settings.environment,
        MEMORY_GENERATION=settings.generation,
        MEMORY_KAFKA__BOOTSTRAP_SERVERS=settings.kafka.bootstrap_servers,
        MEMORY_KAFKA__TOPIC_PREFIX=settings.kafka.topic_prefix,
        MEMORY_KAFKA__PARTITIONS=str(settings.kafka.partitions),
        MEMORY_POSTGRES__DSN=settings.postgres.dsn,
        MEMORY_API__API_KEYS=json.dumps(settings.api.model_dump(mode="json")["api_keys"]),
        MEMORY_LOG_LEVEL="INFO",
        MEMORY_PRIVACY__ENCRYPT_CONTENT=str(settings.privacy.encrypt_content).lower(),
        MEMORY_STATE_DIR=f"/tmp/memory-agent-test/{settings.generation}",
    )
    ring = settings.privacy.master_key_ring
    if ring:  # the same master keys (docs/security.md): the child unwraps the data keys the test's wrapped
        import base64

        env["MEMORY_PRIVACY__MASTER_KEYS"] = json.dumps({k: base64.b64encode(v).decode() for k, v in ring.keys.items()})
        env["MEMORY_PRIVACY__MASTER_KEY_ID"] = ring.current
    return env


@contextlib.asynccontextmanager
async def worker_process(settings: Settings, *args: str, log_name: str = "worker", extra_env: dict | None = None):
    """`memory-agent worker` as a real child process; yields the asyncio Process."""
    import sys
    import tempfile

    log = tempfile.NamedTemporaryFile(prefix=f"{log_name}-", suffix=".log", delete=False)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", "worker", *args,
        env=settings_env(settings) | (extra_env or {}), stdout=log, stderr=asyncio.subprocess.STDOUT,
    )
    process.log_path = log.name
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()
        log.close()

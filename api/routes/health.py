"""Liveness and readiness (each dependency checked on its own)."""

from __future__ import annotations

import asyncio

from aiokafka.client import AIOKafkaClient
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from projections.migrate import available_migrations

router = APIRouter(tags=["health"])


class Check(BaseModel):
    ok: bool
    detail: str


class ReadyOut(BaseModel):
    status: str
    checks: dict[str, Check]
    migration: int | None = None
    generation: str | None = None
    reason: str | None = None


@router.get("/healthz")
async def healthz() -> dict:
    """The process is up."""
    return {"status": "ok"}


async def _postgres(state) -> tuple[bool, str, int | None, str | None]:
    async with state.pool.connection(timeout=state.settings.api.ready_timeout_s) as conn:
        schema = await state.generation.use(conn)
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
        applied = (await cur.fetchone())[0]
    latest = available_migrations()[-1].version
    if applied < latest:
        return False, f"schema at migration {applied}, code needs {latest}: run `memory-agent migrate`", applied, None
    return True, f"migration {applied}", applied, schema.removeprefix("gen_")


async def _kafka(state) -> tuple[bool, str]:
    kafka = state.settings.kafka
    client = AIOKafkaClient(bootstrap_servers=kafka.bootstrap_servers,
                            request_timeout_ms=int(state.settings.api.ready_timeout_s * 1000))
    try:
        await client.bootstrap()
        metadata = await client.fetch_all_metadata()
        if kafka.conversation_topic not in metadata.topics():
            return False, f"topic {kafka.conversation_topic} missing: run `memory-agent migrate`"
        return True, f"{len(metadata.brokers())} broker(s)"
    finally:
        await client.close()


async def _check(probe, timeout: float):
    try:
        return await asyncio.wait_for(probe, timeout)
    except TimeoutError:
        return None, f"no answer within {timeout:g} s"
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return None, f"{type(exc).__name__}: {exc}"


@router.get("/readyz", response_model=ReadyOut, responses={503: {"model": ReadyOut, "description": "Not ready"}})
async def readyz(request: Request) -> JSONResponse:
    """Ready when PostgreSQL answers with this generation's schema fully migrated and the Kafka
    brokers answer with the conversation topic; `checks` says which dependency is down."""
    state, timeout = request.app.state, request.app.state.settings.api.ready_timeout_s
    pg, kafka = await asyncio.gather(_check(_postgres(state), timeout), _check(_kafka(state), timeout))
    migration = generation = None
    if len(pg) == 4:
        pg_ok, pg_detail, migration, generation = pg
    else:
        pg_ok, pg_detail = False, pg[1]
    kafka_ok, kafka_detail = bool(kafka[0]), kafka[1]
    checks = {"postgres": Check(ok=pg_ok, detail=pg_detail), "kafka": Check(ok=kafka_ok, detail=kafka_detail)}
    ready = pg_ok and kafka_ok
    down = [f"{name}: {c.detail}" for name, c in checks.items() if not c.ok]
    body = ReadyOut(status="ready" if ready else "not ready", checks=checks, migration=migration,
                    generation=generation, reason="; ".join(down) or None)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

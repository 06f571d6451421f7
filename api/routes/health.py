"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from projections.migrate import available_migrations

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """PostgreSQL answers and this generation's schema is fully migrated."""
    try:
        async with request.app.state.pool.connection(timeout=2.0) as conn:
            schema = await request.app.state.generation.use(conn)
            cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
            applied = (await cur.fetchone())[0]
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return JSONResponse({"status": "not ready", "reason": f"postgres: {exc}"}, status_code=503)
    latest = available_migrations()[-1].version
    if applied < latest:
        return JSONResponse(
            {"status": "not ready", "reason": f"schema at migration {applied}, code needs {latest}: run `memory-agent migrate`"},
            status_code=503,
        )
    return JSONResponse({"status": "ready", "migration": applied, "generation": schema.removeprefix("gen_")})

"""Operator endpoints: generations and replay progress (X-Admin-Key)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import psycopg
from fastapi import APIRouter, Depends, HTTPException, Request, Security, status

from api.deps import SettingsDep, admin_key_header
from projections import progress as replays
from core.settings import Settings
from projections import generations as gens

router = APIRouter(prefix="/v1/admin", tags=["admin"])


def require_admin(request: Request, settings: SettingsDep,
                  x_admin_key: Annotated[str | None, Security(admin_key_header)] = None) -> Settings:
    if request.app.state.admin_keys.lookup(x_admin_key) is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="missing or unknown X-Admin-Key header")
    return settings


AdminDep = Annotated[Settings, Depends(require_admin)]


def _list(settings: Settings) -> list[dict]:
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        rows = gens.list_generations(conn, settings.kafka.topic_prefix)
        return [{**vars(g), "llm_cache": gens.cache_usage(conn, settings.kafka.topic_prefix, g.name)} for g in rows]


@router.get("/generations")
async def list_generations(settings: AdminDep) -> list[dict]:
    """Every generation with its status, config, LLM cache use and progress against the log."""
    listed = await asyncio.to_thread(_list, settings)
    for generation in listed:
        try:
            progress = await asyncio.wait_for(replays.progress(settings, generation["name"]),
                                              settings.api.ready_timeout_s * 5)
            generation["progress"] = progress.as_dict()
        except Exception as exc:  # noqa: BLE001 - Kafka unavailable: the registry is still worth showing
            generation["progress"] = {"error": f"{type(exc).__name__}: {exc}"}
    return listed

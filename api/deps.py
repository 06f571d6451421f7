"""FastAPI dependencies: settings, a pooled connection, the caller's tenant, the producer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import psycopg
from fastapi import Depends, Header, HTTPException, Request, status

from memory_agent.client import MemoryClient
from memory_agent.settings import Settings


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_conn(request: Request) -> AsyncIterator[psycopg.AsyncConnection]:
    """A pooled connection reading the generation that is active right now."""
    async with request.app.state.pool.connection() as conn:
        await request.app.state.generation.use(conn)
        yield conn


def get_tenant(
    request: Request, x_api_key: Annotated[str | None, Header(description="API key; selects the tenant")] = None
) -> str:
    tenant = request.app.state.settings.api.api_keys.get(x_api_key or "")
    if tenant is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing or unknown X-API-Key header",
            headers={"WWW-Authenticate": "ApiKey"},
        )
    return tenant


def get_client(request: Request) -> MemoryClient:
    return request.app.state.client


SettingsDep = Annotated[Settings, Depends(get_settings)]
ConnDep = Annotated[psycopg.AsyncConnection, Depends(get_conn)]
TenantDep = Annotated[str, Depends(get_tenant)]
ClientDep = Annotated[MemoryClient, Depends(get_client)]

"""The FastAPI application: turn-start context, history, ingest, health and metrics."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import make_asgi_app

from api.generation import ActiveGeneration
from api.routes import admin, context, facts, health, ingest, messages, topics
from memory_agent.client import MemoryClient
from memory_agent.settings import Settings
from projections.db import make_pool


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.settings = settings
        app.state.pool = make_pool(settings)
        app.state.generation = ActiveGeneration(settings)
        await app.state.pool.open(wait=False)
        # The producer connects on first ingest, so reads keep working while Kafka is down.
        app.state.client = MemoryClient(settings)
        try:
            yield
        finally:
            await app.state.client.stop()
            await app.state.pool.close()

    app = FastAPI(
        title="Memory Agent",
        version="0.1.0",
        summary="Turn-start conversation context from an event-sourced memory.",
        lifespan=lifespan,
    )
    for module in (context, messages, ingest, facts, topics, admin, health):
        app.include_router(module.router)
    app.mount("/metrics", make_asgi_app())
    return app

"""Retrieved facts, chunks and memories for the turn-start context (filled in by its issue)."""

from __future__ import annotations

from typing import Any

import psycopg

from api.sections.request import ContextRequest


async def retrieval_section(conn: psycopg.AsyncConnection, request: ContextRequest, app_state: Any) -> Any | None:
    """A pydantic model for ContextOut.retrieved, or None."""
    return None

"""The local model's graph a process embeds documents with: the one its generation's stored
vectors already use (core/embeddings/graph.py), read once when the worker or the API starts."""

from __future__ import annotations

import logging

import psycopg

from core.embeddings.graph import following_stored
from core.settings import Settings
from runtime.db import connect_kwargs

log = logging.getLogger(__name__)

# The names the generation's vectors record: a message's (message index), a chunk's, a fact's. One
# row of each is enough: a generation's rows all come from one graph (this module is what keeps it so).
_STORED_MODELS = ("SELECT (SELECT embedding_model FROM message_embeddings LIMIT 1),"
                  " (SELECT embedding_model FROM conversation_chunks LIMIT 1),"
                  " (SELECT embedding_model FROM facts LIMIT 1)")


async def stored_embedding_models(settings: Settings) -> list[str | None]:
    """The embedding models the generation's stored rows record ([] before its tables exist)."""
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, connect_timeout=5,
                                                     **connect_kwargs(settings)) as conn:
        try:
            return list(await (await conn.execute(_STORED_MODELS)).fetchone())
        except psycopg.errors.UndefinedTable:
            return []


async def settings_following_stored(settings: Settings) -> Settings:
    """`settings` embedding with the graph of the generation's stored vectors (the setting's own
    when it has none). PostgreSQL unreachable: the settings as they are, with a warning."""
    if settings.embedding.provider != "local":
        return settings
    try:
        models = await stored_embedding_models(settings)
    except psycopg.Error as error:
        log.warning("cannot read generation %s's embedding model (%s): documents use embedding.integer_matmul=%s",
                    settings.generation, error, settings.embedding.integer_matmul)
        return settings
    followed = following_stored(settings, models)
    if followed is not settings:
        log.warning("generation %s's vectors come from the %s graph (%s): its documents keep it, not"
                    " embedding.integer_matmul=%s; a replay into a new generation moves it (docs/llm-and-embeddings.md)",
                    settings.generation, "integer" if followed.embedding.integer_matmul else "float",
                    ", ".join(sorted({m for m in models if m})), settings.embedding.integer_matmul)
    return followed

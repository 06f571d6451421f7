"""Embeds every user/assistant message into `message_embeddings`: the log itself is searchable
memory (docs/retrieval.md). Derived from the conversation topic alone, so a replay rebuilds it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import psycopg
from aiokafka.structs import ConsumerRecord

from core.embeddings import Embedder, EmbeddingError, make_embedder
from core.settings import Settings
from runtime.dead_letter import DeadLetter
from projections.erased_messages import erased_messages
from projections.vectors import PackedVector, use_packed_vectors
from schemas.codec import decode
from schemas.envelope import InvalidEvent
from schemas.registry import MESSAGE_APPENDED

log = logging.getLogger(__name__)
_MESSAGE_PREFIX = b'{"type":"message.appended"'  # how schemas.codec.encode starts every message
INDEXED_ROLES = frozenset({"user", "assistant"})  # what people said; never system or tool output
EMBED_CHARS = 2000  # the embedder reads 256 tokens at most; no need to tokenize more
EMBED_BATCH = 256  # texts per embedder call
EMBED_ATTEMPTS, RETRY_DELAY_S = 3, 1.0  # then the batch is left to the keyword search

_EXISTING = (
    "SELECT conversation_id, seq FROM message_embeddings WHERE tenant_id = %s"
    " AND (conversation_id, seq) IN (SELECT * FROM unnest(%s::text[], %s::int[]))"
)
_INSERT = (
    "INSERT INTO message_embeddings (tenant_id, conversation_id, seq, user_id, subject_id, occurred_at,"
    " embedding, embedding_model, event_id)"
    " SELECT t, c, s, u, sub, o, e, %s, ev FROM unnest(%s::text[], %s::text[], %s::int[], %s::text[],"
    " %s::text[], %s::timestamptz[], %b::vector[], %s::text[]) AS x(t, c, s, u, sub, o, e, ev)"
    " ON CONFLICT DO NOTHING"
)


class MessageIndexProjector:
    """Idempotent: a message already indexed is neither embedded nor written again; the first
    event of a (tenant, conversation, seq) wins, as in the messages projector. Invalid records
    are the messages projector's to dead-letter; here they are skipped."""

    name = "message_index"

    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self._embedder = embedder

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:  # the local model loads on its first call, not here
            self._embedder = make_embedder(self.settings)
        return self._embedder

    def topics(self, settings: Settings) -> list[str]:
        return [settings.kafka.conversation_topic]

    def messages(self, records: Sequence[ConsumerRecord]) -> dict[tuple[str, str, int], tuple]:
        """The indexable messages of a batch by key, first one wins."""
        found: dict[tuple[str, str, int], tuple] = {}
        for record in records:
            if record.value is None or not record.value.startswith(_MESSAGE_PREFIX):
                continue
            try:
                event = decode(record.value, max_event_bytes=self.settings.kafka.max_event_bytes,
                               max_content_chars=self.settings.limits.max_content_chars)
            except InvalidEvent:
                continue
            e, p = event.envelope, event.payload
            if event.type != MESSAGE_APPENDED or p.role not in INDEXED_ROLES or not p.content.strip():
                continue
            found.setdefault((e.tenant_id, e.conversation_id, e.seq),
                             (e.user_id, e.subject_id, e.occurred_at, p.content, e.event_id, record))
        return found

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
        found = self.messages(records)
        # Written before an erasure already applied (domain/erasure.py): never embedded.
        await self._drop_erased(conn, found)
        by_tenant: dict[str, list[tuple[str, str, int]]] = {}
        for k in found:
            by_tenant.setdefault(k[0], []).append(k)
        for tenant, keys in by_tenant.items():  # skip what is indexed already (redelivery, restart)
            cur = await conn.execute(_EXISTING, (tenant, [k[1] for k in keys], [k[2] for k in keys]))
            for conversation, seq in await cur.fetchall():
                found.pop((tenant, conversation, seq), None)
        vectors: dict[tuple[str, str, int], object] = {}
        keys = sorted(found)
        for start in range(0, len(keys), EMBED_BATCH):
            batch = keys[start:start + EMBED_BATCH]
            embedded = await self.embed_or_skip([found[k][3][:EMBED_CHARS] for k in batch])
            if embedded is not None:
                vectors.update(zip(batch, embedded))
        if not vectors:
            return []
        # Checked again under the table's write lock: an erasure committed while the batch was
        # embedded is seen now, and one that comes later waits for this transaction and deletes
        # its rows (the erasure locks the table for writes; projections/messages.py
        # `_drop_erased`). The lock is not held while embedding: an erasure never waits for a model.
        await conn.execute("LOCK TABLE message_embeddings IN ROW EXCLUSIVE MODE")
        await self._drop_erased(conn, found)
        await use_packed_vectors(conn)
        rows = [(*k, *found[k][:3], PackedVector(v), found[k][4]) for k, v in vectors.items() if k in found]
        for start in range(0, len(rows), EMBED_BATCH):
            part = rows[start:start + EMBED_BATCH]
            await conn.execute(_INSERT, [self.embedder.model, *(list(column) for column in zip(*part))])
        return []

    @staticmethod
    async def _drop_erased(conn: psycopg.AsyncConnection, found: dict) -> None:
        for key in await erased_messages(conn, {k: (*k[:2], v[0], v[5]) for k, v in found.items()}):
            del found[key]

    async def embed_or_skip(self, texts: list[str]):
        """The vectors, or None when the embedder keeps failing: an outage of a remote embedder
        must not stop the worker's projectors. Skipped messages stay findable by their words
        (the keyword search reads the log itself); a replay embeds them."""
        for attempt in range(EMBED_ATTEMPTS):
            try:
                return await self.embedder.embed_documents(texts)
            except EmbeddingError as error:
                if not error.retryable or attempt == EMBED_ATTEMPTS - 1:
                    log.warning("message index: %d messages left unembedded: %s", len(texts), error)
                    return None
                await asyncio.sleep(RETRY_DELAY_S * 2 ** attempt)
        return None


def projectors(settings: Settings) -> list:
    return [MessageIndexProjector(settings)] if settings.retrieval.index_messages else []

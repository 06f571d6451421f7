"""Applies user.erased / conversation.erased (docs/lineage.md, "Erasure"): every read-model row
derived from the erased messages is deleted in the batch's one transaction.

Scope of a user erasure in tenant T: the conversations the user owns are erased whole; in
conversations of other owners only the user's messages go, and the derived rows that mixed
them with others' words (summaries from the first erased seq on, chunks covering an erased
seq, the conversation's topics) are deleted, their seqs recorded in `erasures.rederive`, and
what to derive again in `erasure_rederive` (sent by streams/rederive.py).
Facts go when they came from an erased conversation or chunk, cite an erased message, or
belong to the user. LLM-cache entries whose output holds one of the deleted derived texts or
erased message texts go too (public.llm_cache is shared by every generation), and so do the
document embeddings of those texts in public.embedding_cache (by the hash of each text as an
embedder saw it: every known document prefix, and the message index's truncation)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import orjson
import psycopg
from psycopg import sql
from aiokafka.structs import ConsumerRecord

from core.embeddings.cache import text_key
from core.embeddings.prefixes import KNOWN_PREFIXES
from core.llm import provenance as llm_provenance
from core.settings import Settings
from runtime.dead_letter import DeadLetter
from projections.decoding import records_of
from projections import scrub
from projections.message_index import EMBED_CHARS
from schemas import erasure_events as ee
from schemas.codec import Event, peek_type
from schemas.limits import Limits

log = logging.getLogger(__name__)

# Rows keyed by (tenant_id, conversation_id) deleted whole for an erased conversation.
_WHOLE = ("message_embeddings", "messages", "projection_anomalies", "topic_messages", "topic_archives",
          "topic_unassigned", "topic_assignments", "topic_activations", "topic_compactions", "topic_conversations",
          "surfaced_items", "served_contexts", "erasure_rederive")
# Derived from a whole conversation's mix: deleted when any of its messages is erased.
_TOPIC_TABLES = ("topic_messages", "topic_archives", "topic_unassigned", "topic_assignments", "topic_activations",
                 "topic_compactions", "topic_conversations")


class ErasureProjector:
    name = "erasure"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def topics(self, settings: Settings) -> list[str]:
        return [settings.kafka.conversation_topic]

    def shares_transaction(self, records: Sequence[ConsumerRecord]) -> bool:
        """Whether these records may be applied in a transaction its projector group shares
        (projections/runner.py): an erasure locks tables and waits for them in savepoints of a
        transaction holding nothing else (`_erase_yielding`), so only a batch sure to hold none
        (it is only skipped; its offsets are stored) joins one."""
        return not any((kind := peek_type(r.value)) is None or kind in ee.ERASURE_TYPES for r in records)

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
        for record, event in records_of(records, ee.ERASURE_TYPES, Limits.of(self.settings)):
            await _erase_yielding(conn, event, record, document_prefix=self.settings.embedding.document_prefix,
                                  deployment=self.settings.kafka.topic_prefix)
        return []


def embedding_cache_keys(texts: Sequence[str], document_prefix: str | None = None) -> list[bytes]:
    """The public.embedding_cache keys any embedder of this code base may have written for
    `texts`: each text whole and cut as the message index cuts it, behind no prefix, every
    known model's document prefix and the configured one (the cache is shared by every
    generation and model, so every variant is tried)."""
    prefixes = {"", *(p.document for _, p in KNOWN_PREFIXES), document_prefix or ""}
    variants = {v for t in texts if t for v in (t, t[:EMBED_CHARS])}
    return sorted({text_key(p + v) for p in prefixes for v in variants})


# Every table the erasure deletes from that other projectors (and the API) write. Locked for
# writes before anything is deleted: a DELETE on `topics` checks the rows of `topic_messages`
# referencing it and waits for a projector's uncommitted insert, which may itself wait for the
# erasure (a deadlock, seen in a replay). With the tables locked, no uncommitted row of another
# writer exists while the erasure deletes; readers are not blocked.
_LOCKED = ("messages", "message_embeddings", "conversations", "projection_anomalies", "memory", "conversation_chunks",
           "facts", "fact_links", "fact_history", "fact_decisions", "surfaced_items", "served_contexts", "topics",
           "topic_messages", "topic_archives", "topic_unassigned", "topic_assignments", "topic_activations",
           "topic_compactions", "topic_conversations", "public.embedding_cache")
# The derived tables whose inserts the tombstones filter (migration 0016's drop_erased).
_TOMBSTONED = ("memory", "conversation_chunks", "message_embeddings", "served_contexts", "topics", "topic_messages",
               "topic_archives", "topic_unassigned", "topic_assignments", "topic_activations", "topic_compactions",
               "topic_conversations")
_WHEN_MAX = 200
LOCK_TIMEOUT_MS = 500  # below PostgreSQL's deadlock_timeout (1 s): a writer waiting on us never sees a cycle


async def _install_tombstone_triggers(conn: psycopg.AsyncConnection) -> None:
    """The triggers that check the tombstones (migration 0016's drop_erased), (re)created after
    each erasure with the tombstoned conversations as a constant: a row of any other
    conversation is let through by the trigger's WHEN (a hashed lookup in C), and a generation
    that never erased has no trigger at all. The tables are locked by this transaction."""
    keys = [f"{t}/{c}" for t, c in await (await conn.execute(
        "SELECT DISTINCT tenant_id, conversation_id FROM erasure_tombstones ORDER BY 1, 2")).fetchall()]
    if not keys:
        return
    # A trigger's WHEN scans its list (it is not planned, so not hashed): past a few hundred
    # conversations the function's own index probe is cheaper.
    when = sql.SQL(" WHEN ((NEW.tenant_id || '/' || NEW.conversation_id) = ANY({}::text[]))").format(
        sql.Literal(keys)) if len(keys) <= _WHEN_MAX else sql.SQL("")
    for table in _TOMBSTONED:
        events = "INSERT OR UPDATE OF status" if table == "memory" else "INSERT"
        await conn.execute(sql.SQL("CREATE OR REPLACE TRIGGER {} BEFORE {} ON {} FOR EACH ROW{}"
                                   " EXECUTE FUNCTION drop_erased()").format(
            sql.Identifier(f"{table}_drop_erased"), sql.SQL(events), sql.Identifier(table), when))


async def _erase_yielding(conn: psycopg.AsyncConnection, event: Event, record: ConsumerRecord | None = None,
                          attempts: int = 240, document_prefix: str | None = None, deployment: str = "") -> None:
    """`erase` after locking `_LOCKED` for writes (SHARE ROW EXCLUSIVE: writers wait, readers do
    not), in a savepoint where any lock wait gives up after LOCK_TIMEOUT_MS: rolled back (its
    locks released) and tried again with backoff. The erasure never waits long enough for another
    writer's deadlock check to find it in a cycle, so the other writer is never the one aborted."""
    for attempt in range(1, attempts + 1):
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                await conn.execute(f"LOCK TABLE {', '.join(_LOCKED)} IN SHARE ROW EXCLUSIVE MODE")
                await erase(conn, event, record, document_prefix=document_prefix, deployment=deployment)
                await _install_tombstone_triggers(conn)
                await conn.execute("SET LOCAL lock_timeout = 0")
            return
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            if attempt == attempts:
                raise
            log.info("erasure %s: a table or row is busy (attempt %d); trying again", event.envelope.event_id, attempt)
            await asyncio.sleep(min(0.05 * attempt, 1.0))


async def _ids(conn, sql: str, params) -> list:
    return [row[0] for row in await (await conn.execute(sql, params)).fetchall()]


async def _plan_rederive(conn, erasure_id: str, tenant: str, conversation: str, seqs: list[int],
                         chunk_ids: list[str]) -> None:
    """What the mixed conversation's owner gets again: the summaries from the newest one kept
    (it ends before the first erased seq), and the chunk ranges about to be deleted."""
    base = await (await conn.execute(
        "SELECT memory_id, end_sequence FROM memory WHERE tenant_id = %s AND conversation_id = %s"
        " AND status = 'completed' AND end_sequence < %s ORDER BY memory_id DESC LIMIT 1",
        (tenant, conversation, min(seqs)))).fetchone()
    ranges = await (await conn.execute(
        "SELECT message_range_start, message_range_end FROM conversation_chunks WHERE tenant_id = %s"
        " AND conversation_id = %s AND chunk_id = ANY(%s::text[]) ORDER BY message_range_start",
        (tenant, conversation, chunk_ids))).fetchall()
    await conn.execute(
        "INSERT INTO erasure_rederive (erasure_event_id, tenant_id, conversation_id, erased_seqs, base_memory_id,"
        " base_end_seq, chunk_ranges) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (erasure_id, tenant, conversation, seqs, base[0] if base else None, base[1] if base else None,
         orjson.dumps([list(r) for r in ranges]).decode()))


async def _tombstones(conn, erasure_id: str, tenant: str, whole: list[str], partial: dict[str, list[int]]) -> None:
    """A whole conversation up to its last seq known now; in a mixed one, the erased messages."""
    await conn.execute(
        "INSERT INTO erasure_tombstones (tenant_id, conversation_id, erasure_event_id, whole, through_seq)"
        " SELECT %(t)s, w, %(e)s, true, COALESCE((SELECT last_seq FROM conversations c WHERE c.tenant_id = %(t)s"
        " AND c.conversation_id = w), (SELECT max(seq) FROM messages m WHERE m.tenant_id = %(t)s"
        " AND m.conversation_id = w), -1) FROM unnest(%(w)s::text[]) w ON CONFLICT DO NOTHING",
        {"t": tenant, "e": erasure_id, "w": whole})
    for conversation, seqs in partial.items():
        await conn.execute(
            "INSERT INTO erasure_tombstones (tenant_id, conversation_id, erasure_event_id, whole, through_seq, event_ids)"
            " SELECT %s, %s, %s, false, -1, coalesce(array_agg(event_id), '{}') FROM messages WHERE tenant_id = %s"
            " AND conversation_id = %s AND seq = ANY(%s::int[]) ON CONFLICT DO NOTHING",
            (tenant, conversation, erasure_id, tenant, conversation, seqs))


async def erase(conn: psycopg.AsyncConnection, event: Event, record: ConsumerRecord | None = None,
                document_prefix: str | None = None, deployment: str = "") -> dict[str, int]:
    """Delete what `event` erases; idempotent (a second delivery finds nothing left). `record`:
    where the event is on the log, recorded so that the messages projector can tell the erased
    user's messages written before it from those written after (projections/erased_messages.py).
    `document_prefix`: the configured embedding document prefix (embedding_cache_keys)."""
    e = event.envelope
    tenant = e.tenant_id
    done = await conn.execute("SELECT 1 FROM erasures WHERE event_id = %s", (e.event_id,))
    if await done.fetchone():
        return {}
    if event.type == ee.USER_ERASED:
        user = event.payload.erased_user_id
        whole = await _ids(conn, "SELECT conversation_id FROM conversations WHERE tenant_id = %s AND user_id = %s"
                                 " UNION SELECT source_conversation_id FROM facts WHERE tenant_id = %s"
                                 " AND owner_user_id = %s AND source_conversation_id IS NOT NULL",
                           (tenant, user, tenant, user))
        partial_rows = await (await conn.execute(
            "SELECT conversation_id, array_agg(seq ORDER BY seq) FROM messages WHERE tenant_id = %s AND user_id = %s"
            " AND NOT (conversation_id = ANY(%s::text[])) GROUP BY conversation_id", (tenant, user, whole))).fetchall()
        partial = {c: seqs for c, seqs in partial_rows}
    else:
        user = None
        whole = [event.payload.erased_conversation_id]
        partial = {}
    counts: dict[str, int] = {}

    async def delete(label: str, sql: str, params) -> None:
        cur = await conn.execute(sql, params)
        counts[label] = counts.get(label, 0) + max(cur.rowcount, 0)

    # What the erased messages were and what was derived from them, for the caches and facts.
    erased_events = await _ids(conn, "SELECT event_id FROM messages WHERE tenant_id = %s AND"
                                     " (conversation_id = ANY(%s::text[]) OR (user_id = %s))", (tenant, whole, user))
    texts = await _ids(conn, "SELECT content FROM messages WHERE tenant_id = %s AND event_id = ANY(%s::text[])",
                       (tenant, erased_events))
    chunk_ids = await _ids(conn, "SELECT chunk_id FROM conversation_chunks WHERE tenant_id = %s AND"
                                 " (conversation_id = ANY(%s::text[]) OR source_event_ids && %s::text[] OR user_id = %s)",
                           (tenant, whole, erased_events, user))
    fact_ids = await _ids(conn, "SELECT fact_id FROM facts WHERE tenant_id = %s AND (source_conversation_id = ANY(%s::text[])"
                                " OR source_chunk_id = ANY(%s::text[]) OR source_event_ids && %s::text[] OR owner_user_id = %s)",
                          (tenant, whole, chunk_ids, erased_events, user))
    mixed = list(partial)
    texts += await _ids(conn, "SELECT content FROM conversation_chunks WHERE chunk_id = ANY(%s::text[])", (chunk_ids,))
    texts += await _ids(conn, "SELECT content FROM facts WHERE fact_id = ANY(%s::text[])", (fact_ids,))
    texts += await _ids(conn, "SELECT new_content FROM fact_history WHERE fact_id = ANY(%s::text[]) AND new_content IS NOT"
                              " NULL UNION SELECT old_content FROM fact_history WHERE fact_id = ANY(%s::text[]) AND old_content"
                              " IS NOT NULL", (fact_ids, fact_ids))
    texts += await _ids(conn, "SELECT memory_text FROM memory WHERE tenant_id = %s AND memory_text IS NOT NULL AND"
                              " (conversation_id = ANY(%s::text[]) OR conversation_id = ANY(%s::text[]))", (tenant, whole, mixed))
    texts += await _ids(conn, "SELECT summary FROM topics WHERE tenant_id = %s AND summary IS NOT NULL AND"
                              " (conversation_id = ANY(%s::text[]) OR conversation_id = ANY(%s::text[])) UNION SELECT summary FROM"
                              " topic_compactions WHERE tenant_id = %s AND (conversation_id = ANY(%s::text[]) OR"
                              " conversation_id = ANY(%s::text[]))", (tenant, whole, mixed, tenant, whole, mixed))

    # What mixed conversations get again (streams/rederive.py), before their rows go, and the
    # tombstones that keep derived events still in flight from bringing rows back (0016).
    for conversation, seqs in partial.items():
        await _plan_rederive(conn, e.event_id, tenant, conversation, seqs, chunk_ids)
    await _tombstones(conn, e.event_id, tenant, whole, partial)
    # Facts and everything hanging off them.
    await delete("fact_links", "DELETE FROM fact_links WHERE from_fact_id = ANY(%s::text[]) OR to_fact_id = ANY(%s::text[])",
                 (fact_ids, fact_ids))
    await delete("fact_history", "DELETE FROM fact_history WHERE fact_id = ANY(%s::text[])", (fact_ids,))
    await delete("fact_decisions", "DELETE FROM fact_decisions WHERE tenant_id = %s AND (fact_id = ANY(%s::text[])"
                 " OR owner_user_id = %s)", (tenant, fact_ids, user))
    await delete("surfaced_items", "DELETE FROM surfaced_items WHERE tenant_id = %s AND (item_id = ANY(%s::text[])"
                 " OR item_id = ANY(%s::text[]))", (tenant, fact_ids, chunk_ids))
    await delete("facts", "DELETE FROM facts WHERE fact_id = ANY(%s::text[])", (fact_ids,))
    await delete("conversation_chunks", "DELETE FROM conversation_chunks WHERE chunk_id = ANY(%s::text[])", (chunk_ids,))
    # Erased conversations, whole.
    await delete("memory", "DELETE FROM memory WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])", (tenant, whole))
    for table in ("topic_messages", "topic_archives"):  # before topics (foreign keys)
        await delete(table, f"DELETE FROM {table} WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])", (tenant, whole))
    await delete("topics", "DELETE FROM topics WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])", (tenant, whole))
    for table in _WHOLE:
        await delete(table, f"DELETE FROM {table} WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])", (tenant, whole))
    await delete("conversations", "DELETE FROM conversations WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])",
                 (tenant, whole))
    # Other owners' conversations the user wrote in: the user's messages and what mixed them.
    for conversation, seqs in partial.items():
        params = (tenant, conversation, seqs)
        for table in ("message_embeddings", "messages"):
            await delete(table, f"DELETE FROM {table} WHERE tenant_id = %s AND conversation_id = %s"
                                " AND seq = ANY(%s::int[])", params)
        await delete("memory", "DELETE FROM memory WHERE tenant_id = %s AND conversation_id = %s"
                               " AND end_sequence >= %s", (tenant, conversation, min(seqs)))
        for table in _TOPIC_TABLES:
            await delete(table, f"DELETE FROM {table} WHERE tenant_id = %s AND conversation_id = %s",
                         (tenant, conversation))
        await delete("topics", "DELETE FROM topics WHERE tenant_id = %s AND conversation_id = %s", (tenant, conversation))
    if user is not None:
        await delete("served_contexts", "DELETE FROM served_contexts WHERE tenant_id = %s AND user_id = %s",
                     (tenant, user))
    texts = sorted({t for t in texts if t})
    if texts:
        # public.llm_cache: entries whose output holds one of the texts as a string value.
        await delete("llm_cache", "DELETE FROM public.llm_cache c WHERE EXISTS (SELECT 1 FROM"
                     " jsonb_path_query(c.output, 'strict $.**') v WHERE jsonb_typeof(v) = 'string'"
                     " AND (v #>> '{}') = ANY(%s::text[]))", (texts,))
        # public.embedding_cache: the vector of every erased or deleted text, by its hash.
        # Its keys are remembered first: a consumer still embedding one of the texts (it read
        # the log before this erasure) writes no vector back afterwards (cache.py's insert).
        keys = embedding_cache_keys(texts, document_prefix)
        await conn.execute("INSERT INTO public.erased_text_keys (deployment, text_sha256)"
                           " SELECT %s, unnest(%s::bytea[]) ON CONFLICT DO NOTHING", (deployment, keys))
        await delete("embedding_cache", "DELETE FROM public.embedding_cache WHERE text_sha256 = ANY(%s)", (keys,))
    # public.llm_cache by provenance: entries a request of an erased conversation wrote or used
    # (core/llm/provenance.py, crypto branch).
    counts["llm_cache"] = counts.get("llm_cache", 0) + await llm_provenance.erase(conn, tenant, [*whole, *partial])
    # The files: every table it deleted from is rewritten by the scrub (projections/scrub.py); for a
    # user erasure also public.data_keys, whose destroyed key's old row version is still on its pages.
    # memory_items and its lexicon (migration 0020) lose their rows by the tables' triggers.
    indexed = ["memory_items", "memory_lexicon"] if any(counts.get(t) for t in (
        "facts", "conversation_chunks", "messages", "message_embeddings")) else []
    await scrub.request(conn, e.event_id, [*(t for t, n in counts.items() if n), *indexed,
                                           *(["data_keys"] if user else [])])
    await conn.execute(
        "INSERT INTO erasures (event_id, tenant_id, kind, erased_user_id, conversation_ids, deleted_rows, rederive,"
        " requested_by, requested_at, log_partition, log_offset, logged_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, to_timestamp(%s / 1000.0)) ON CONFLICT DO NOTHING",
        (e.event_id, tenant, "user" if user is not None else "conversation", user, sorted(set(whole) | set(partial)),
         orjson.dumps({k: v for k, v in counts.items() if v}).decode(), orjson.dumps(partial).decode(),
         e.user_id, e.occurred_at, *((record.partition, record.offset, record.timestamp) if record else (None,) * 3)))
    log.info("erasure %s (%s) in %s: %s", e.event_id, event.type, tenant, {k: v for k, v in counts.items() if v})
    return counts

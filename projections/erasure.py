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


# Erasures of one tenant applied in one transaction (one lock of the tables, one pass over the
# shared caches, the tombstone triggers made once): at most this many. The writers they keep
# waiting (the messages projector) wait for one such transaction: with 8, tenant B's worst append
# during a flood was 4x worse than with 1 and the flood was not applied faster (docs/security.md).
MAX_BATCH = 1
_BOUNDS_KEPT = 10_000


class ErasureProjector:
    name = "erasure"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # {(topic, partition, offset): {partition: first offset not erased}} of each erasure
        # record, given by its group once known (time_order.targets; ProjectorGroup.bound).
        self.bounds: dict[tuple[str, int, int], dict[int, int]] = {}

    def topics(self, settings: Settings) -> list[str]:
        return [settings.kafka.conversation_topic]

    def shares_transaction(self, records: Sequence[ConsumerRecord]) -> bool:
        """Whether these records may be applied in a transaction its projector group shares
        (projections/runner.py): an erasure locks tables and waits for them in savepoints of a
        transaction holding nothing else (`_erase_yielding`), so only a batch sure to hold none
        (it is only skipped; its offsets are stored) joins one."""
        return not any((kind := peek_type(r.value)) is None or kind in ee.ERASURE_TYPES for r in records)

    def bound(self, record: ConsumerRecord, targets: dict[int, int]) -> None:
        """Kept until overwritten (a batch retried after an outage applies with it again); the
        oldest go past _BOUNDS_KEPT."""
        key = (record.topic, record.partition, record.offset)
        self.bounds.pop(key, None)
        self.bounds[key] = dict(targets)
        while len(self.bounds) > _BOUNDS_KEPT:
            del self.bounds[next(iter(self.bounds))]

    def segments(self, records: Sequence[ConsumerRecord]) -> list[list[ConsumerRecord]]:
        """`records` cut, in log order, into the transactions of a consumer of its own: runs of
        up to MAX_BATCH erasures of one tenant (what else is there is only skipped)."""
        return batches(records)

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
        found = records_of(records, ee.ERASURE_TYPES, Limits.of(self.settings))
        for run in _runs([(record, event) for record, event in found], lambda pair: pair[1].envelope.tenant_id):
            keys = [(r.topic, r.partition, r.offset) for r, _ in run]
            await _erase_yielding(conn, run, document_prefix=self.settings.embedding.document_prefix,
                                  deployment=self.settings.kafka.topic_prefix,
                                  bounds=[self.bounds.get(key) for key in keys])
        return []


def _tenant_of(record: ConsumerRecord) -> bytes:
    return (record.key or b"").split(b"/", 1)[0]


def _runs(items: Sequence, tenant) -> list[list]:
    """`items` in order, cut where the tenant changes and after MAX_BATCH."""
    runs: list[list] = []
    for item in items:
        if runs and len(runs[-1]) < MAX_BATCH and tenant(runs[-1][0]) == tenant(item):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def batches(records: Sequence[ConsumerRecord]) -> list[list[ConsumerRecord]]:
    """`records` in order, cut so that each part holds at most MAX_BATCH erasures, all of one
    tenant (by the record key's tenant); the other records go with the part they follow."""
    parts: list[list[ConsumerRecord]] = []
    erasures = 0
    tenant: bytes | None = None
    for record in records:
        kind = peek_type(record.value)
        if kind is None or kind in ee.ERASURE_TYPES:
            mine = _tenant_of(record)
            if not parts or (tenant is not None and (erasures >= MAX_BATCH or mine != tenant)):
                parts.append([])
                erasures = 0
            tenant = mine
            erasures += 1
        elif not parts:
            parts.append([])
        parts[-1].append(record)
    return parts


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


async def _erase_yielding(conn: psycopg.AsyncConnection, run: Sequence[tuple[ConsumerRecord | None, Event]],
                          attempts: int = 240, document_prefix: str | None = None, deployment: str = "",
                          bounds: Sequence[dict[int, int] | None] | None = None) -> None:
    """`erase` of each erasure of `run` (one tenant's, in log order) after locking `_LOCKED` for
    writes (SHARE ROW EXCLUSIVE: writers wait, readers do not), then one pass over the shared
    caches for all of them (`CachePass`) and the tombstone triggers once, in a savepoint where any
    lock wait gives up after LOCK_TIMEOUT_MS: rolled back (its locks released) and tried again
    with backoff. The erasure never waits long enough for another writer's deadlock check to find
    it in a cycle, so the other writer is never the one aborted."""
    bounds = list(bounds) if bounds is not None else [None] * len(run)
    for attempt in range(1, attempts + 1):
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                await conn.execute(f"LOCK TABLE {', '.join(_LOCKED)} IN SHARE ROW EXCLUSIVE MODE")
                caches = CachePass(document_prefix, deployment)
                for (record, event), bound in zip(run, bounds):
                    await erase(conn, event, record, document_prefix=document_prefix, deployment=deployment,
                                bound=bound, caches=caches)
                await caches.flush(conn)
                await _install_tombstone_triggers(conn)
                await conn.execute("SET LOCAL lock_timeout = 0")
            return
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            if attempt == attempts:
                raise
            log.info("erasures %s: a table or row is busy (attempt %d); trying again",
                     ", ".join(event.envelope.event_id for _, event in run), attempt)
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


async def _tombstones(conn, erasure_id: str, tenant: str, whole: list[str], partial: dict[str, list[int]],
                      later: dict[str, int]) -> None:
    """A whole conversation up to its last seq known now (with messages written after the
    erasure: its last seq before it); in a mixed one, the erased messages."""
    await conn.execute(
        "INSERT INTO erasure_tombstones (tenant_id, conversation_id, erasure_event_id, whole, through_seq)"
        " SELECT %s, c, %s, true, s FROM unnest(%s::text[], %s::int[]) AS u(c, s) ON CONFLICT DO NOTHING",
        (tenant, erasure_id, list(later), list(later.values())))
    whole = [c for c in whole if c not in later]
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


# A message (alias m) written before the erasure: at an offset below its bound on its partition
# (`%(bound)s`: {partition: first offset not erased}; NULL, or a partition it does not name: before).
_BEFORE = ("(%(bound)s::jsonb IS NULL OR m.source_offset < COALESCE((%(bound)s::jsonb ->> m.source_partition::text)"
           "::bigint, 9223372036854775807))")


async def _scope(conn, event: Event, bound: dict[int, int] | None
                 ) -> tuple[list[str], dict[str, list[int]], list[str], dict[str, int]]:
    """(conversations erased whole, {mixed conversation: the user's erased seqs}, conversations
    the erasure does not reach (the user's own, every message written after it), {whole
    conversation with messages written after the erasure: the last seq before it})."""
    tenant = event.envelope.tenant_id
    p = {"t": tenant, "bound": _json(bound)}
    if event.type == ee.USER_ERASED:
        p["u"] = event.payload.erased_user_id
        owned = await (await conn.execute(
            "SELECT c.conversation_id, count(m.seq), coalesce(bool_or(" + _BEFORE + "), false) FROM conversations c"
            " LEFT JOIN messages m ON m.tenant_id = c.tenant_id AND m.conversation_id = c.conversation_id"
            " WHERE c.tenant_id = %(t)s AND c.user_id = %(u)s GROUP BY c.conversation_id", p)).fetchall()
        p["after"] = [c for c, n, before in owned if n and not before]
        whole = sorted({c for c, n, before in owned if not n or before} | set(await _ids(
            conn, "SELECT source_conversation_id FROM facts WHERE tenant_id = %(t)s AND owner_user_id = %(u)s"
                  " AND source_conversation_id IS NOT NULL AND NOT (source_conversation_id = ANY(%(after)s::text[]))",
            p)))
        p["w"] = whole
        partial = dict(await (await conn.execute(
            "SELECT m.conversation_id, array_agg(m.seq ORDER BY m.seq) FROM messages m WHERE m.tenant_id = %(t)s"
            " AND m.user_id = %(u)s AND NOT (m.conversation_id = ANY(%(w)s::text[])) AND " + _BEFORE +
            " GROUP BY m.conversation_id", p)).fetchall())
    else:
        whole, partial, p["after"] = [event.payload.erased_conversation_id], {}, []
        p["w"] = whole
    later = dict(await (await conn.execute(
        "SELECT m.conversation_id, coalesce(max(m.seq) FILTER (WHERE " + _BEFORE + "), -1) FROM messages m"
        " WHERE m.tenant_id = %(t)s AND m.conversation_id = ANY(%(w)s::text[]) GROUP BY m.conversation_id"
        " HAVING bool_or(NOT " + _BEFORE + ")", p)).fetchall())
    return whole, partial, p["after"], later


async def erase(conn: psycopg.AsyncConnection, event: Event, record: ConsumerRecord | None = None,
                document_prefix: str | None = None, deployment: str = "", bound: dict[int, int] | None = None,
                caches: "CachePass | None" = None) -> dict[str, int]:
    """Delete what `event` erases; idempotent (a second delivery finds nothing left). `record`:
    where the event is on the log, recorded so that the messages projector can tell the erased
    user's messages written before it from those written after (projections/erased_messages.py).
    `bound`: {partition: first offset not erased} (time_order.targets): a message at or past it
    was written after the erasure and stays, with what the erasure does not otherwise delete
    (None: every message in scope, whenever written). `document_prefix`: the configured
    embedding document prefix (embedding_cache_keys). `caches`: the texts whose cache entries go
    are collected there, for one pass over the shared caches per batch (`CachePass.flush`)."""
    e = event.envelope
    tenant = e.tenant_id
    done = await conn.execute("SELECT 1 FROM erasures WHERE event_id = %s", (e.event_id,))
    if await done.fetchone():
        return {}
    user = event.payload.erased_user_id if event.type == ee.USER_ERASED else None
    whole, partial, after, later = await _scope(conn, event, bound)
    counts: dict[str, int] = {}

    async def delete(label: str, sql: str, params) -> None:
        cur = await conn.execute(sql, params)
        counts[label] = counts.get(label, 0) + max(cur.rowcount, 0)

    # What the erased messages were and what was derived from them, for the caches and facts;
    # the messages of whole conversations written after the erasure (`later`) are kept.
    kept = await _ids(conn, "SELECT m.event_id FROM messages m WHERE m.tenant_id = %(t)s AND m.conversation_id ="
                            " ANY(%(w)s::text[]) AND NOT " + _BEFORE, {"t": tenant, "w": list(later), "bound": _json(bound)})
    erased_events = await _ids(conn, "SELECT m.event_id FROM messages m WHERE m.tenant_id = %(t)s AND ((m.conversation_id"
                                     " = ANY(%(w)s::text[]) AND NOT (m.event_id = ANY(%(k)s::text[]))) OR (m.user_id = %(u)s"
                                     " AND " + _BEFORE + "))",
                               {"t": tenant, "w": whole, "k": kept, "u": user, "bound": _json(bound)})
    texts = await _ids(conn, "SELECT content FROM messages WHERE tenant_id = %s AND event_id = ANY(%s::text[])",
                       (tenant, erased_events))
    chunk_ids = await _ids(conn, "SELECT chunk_id FROM conversation_chunks WHERE tenant_id = %s AND"
                                 " (conversation_id = ANY(%s::text[]) OR source_event_ids && %s::text[] OR (user_id = %s"
                                 " AND NOT (conversation_id = ANY(%s::text[]))))",
                           (tenant, whole, erased_events, user, after))
    fact_ids = await _ids(conn, "SELECT fact_id FROM facts WHERE tenant_id = %s AND (source_conversation_id = ANY(%s::text[])"
                                " OR source_chunk_id = ANY(%s::text[]) OR source_event_ids && %s::text[] OR (owner_user_id = %s"
                                " AND (source_conversation_id IS NULL OR NOT (source_conversation_id = ANY(%s::text[])))))",
                          (tenant, whole, chunk_ids, erased_events, user, after))
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
    await _tombstones(conn, e.event_id, tenant, whole, partial, later)
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
    await delete("message_embeddings", "DELETE FROM message_embeddings x WHERE tenant_id = %s AND conversation_id ="
                 " ANY(%s::text[]) AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.tenant_id = x.tenant_id AND"
                 " m.conversation_id = x.conversation_id AND m.seq = x.seq AND m.event_id = ANY(%s::text[]))",
                 (tenant, whole, kept))
    await delete("messages", "DELETE FROM messages WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])"
                 " AND NOT (event_id = ANY(%s::text[]))", (tenant, whole, kept))
    for table in _WHOLE:
        if table not in ("message_embeddings", "messages"):
            await delete(table, f"DELETE FROM {table} WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])",
                         (tenant, whole))
    await delete("conversations", "DELETE FROM conversations WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])",
                 (tenant, whole))
    if later:  # the messages written after the erasure: their conversation, from its first remaining writer
        await conn.execute(
            "INSERT INTO conversations (tenant_id, conversation_id, user_id, subject_id, last_seq, message_count)"
            " SELECT DISTINCT ON (conversation_id) tenant_id, conversation_id, user_id, subject_id,"
            " max(seq) OVER w, count(*) OVER w FROM messages WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])"
            " WINDOW w AS (PARTITION BY conversation_id) ORDER BY conversation_id, seq ON CONFLICT DO NOTHING",
            (tenant, list(later)))
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
    own = caches is None
    caches = CachePass(document_prefix, deployment) if own else caches
    caches.add(e.event_id, tenant, texts, [*whole, *partial])
    if own:
        for label, n in (await caches.flush(conn)).items():
            counts[label] = counts.get(label, 0) + n
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
    if bound is not None:
        await conn.execute("UPDATE erasures SET log_bound = %s WHERE event_id = %s", (_json(bound), e.event_id))
    log.info("erasure %s (%s) in %s: %s", e.event_id, event.type, tenant, {k: v for k, v in counts.items() if v})
    return counts


def _json(bound: dict[int, int] | None) -> str | None:
    return None if bound is None else orjson.dumps({str(k): v for k, v in bound.items()}).decode()


class CachePass:
    """The shared caches' entries of a batch of erasures' texts, deleted in one pass each:
    public.llm_cache (a scan of every entry's output) and public.embedding_cache (by key), and
    the LLM-cache entries by provenance. Then the scrub rows of those tables, for every erasure
    of the batch (each one's own tables it requested itself)."""

    def __init__(self, document_prefix: str | None, deployment: str) -> None:
        self.document_prefix, self.deployment = document_prefix, deployment
        self.texts: set[str] = set()
        self.erasures: list[str] = []
        self.conversations: dict[str, set[str]] = {}

    def add(self, erasure_id: str, tenant: str, texts: Sequence[str], conversations: Sequence[str]) -> None:
        self.erasures.append(erasure_id)
        self.texts.update(texts)
        self.conversations.setdefault(tenant, set()).update(conversations)

    async def flush(self, conn: psycopg.AsyncConnection) -> dict[str, int]:
        counts = {"llm_cache": 0, "embedding_cache": 0}
        texts = sorted(self.texts)
        if texts:
            # public.llm_cache: entries whose output holds one of the texts as a string value.
            cur = await conn.execute("DELETE FROM public.llm_cache c WHERE EXISTS (SELECT 1 FROM"
                                     " jsonb_path_query(c.output, 'strict $.**') v WHERE jsonb_typeof(v) = 'string'"
                                     " AND (v #>> '{}') = ANY(%s::text[]))", (texts,))
            counts["llm_cache"] += max(cur.rowcount, 0)
            # public.embedding_cache: the vector of every erased or deleted text, by its hash.
            # Its keys are remembered first: a consumer still embedding one of the texts (it read
            # the log before this erasure) writes no vector back afterwards (cache.py's insert).
            keys = embedding_cache_keys(texts, self.document_prefix)
            await conn.execute("INSERT INTO public.erased_text_keys (deployment, text_sha256)"
                               " SELECT %s, unnest(%s::bytea[]) ON CONFLICT DO NOTHING", (self.deployment, keys))
            cur = await conn.execute("DELETE FROM public.embedding_cache WHERE text_sha256 = ANY(%s)", (keys,))
            counts["embedding_cache"] += max(cur.rowcount, 0)
        # public.llm_cache by provenance: entries a request of an erased conversation wrote or used
        # (core/llm/provenance.py, crypto branch).
        for tenant, conversations in sorted(self.conversations.items()):
            counts["llm_cache"] += await llm_provenance.erase(conn, tenant, sorted(conversations))
        for erasure_id in self.erasures:
            await scrub.request(conn, erasure_id, [t for t, n in counts.items() if n])
        self.texts, self.erasures, self.conversations = set(), [], {}
        return counts

"""Projects topic events into topics, topic_messages and the gzip archives (idempotent)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg
from aiokafka.structs import ConsumerRecord

from core.settings import Settings
from runtime.dead_letter import DeadLetter
from projections.decoding import events_of
from schemas import topic_events as te
from schemas.codec import Event
from schemas.limits import Limits
from domain.topics.archive import compress_bytes, merge_messages, to_json_bytes
from domain.topics.state import TopicMessage

log = logging.getLogger(__name__)

PROJECTED = frozenset({
    te.TOPIC_CREATED, te.TOPIC_MESSAGE_ASSIGNED, te.TOPIC_MESSAGE_UNASSIGNED, te.TOPIC_ACTIVATED,
    te.TOPIC_ARCHIVE_RESTORE_REQUESTED, te.TOPIC_COMPACTION_REQUESTED, te.TOPIC_COMPACTED,
    te.TOPIC_COMPACTION_FAILED, te.TOPIC_EVICTED,
})
_KEY = "tenant_id = %(tenant)s AND conversation_id = %(conversation)s"
_TOPIC = _KEY + " AND topic_id = %(topic)s"

_UPSERT_SNAPSHOT = """
INSERT INTO topics (tenant_id, conversation_id, topic_id, title, first_seq, importance, access_count, message_count,
                    snapshot_seq, created_at, last_active_at)
VALUES (%(tenant)s, %(conversation)s, %(topic)s, %(title)s, %(seq)s, %(importance)s, %(access_count)s,
        %(message_count)s, %(seq)s, %(created_at)s, %(last_active_at)s)
ON CONFLICT (tenant_id, conversation_id, topic_id) DO UPDATE
   SET importance = EXCLUDED.importance, access_count = EXCLUDED.access_count,
       message_count = EXCLUDED.message_count, last_active_at = EXCLUDED.last_active_at,
       snapshot_seq = EXCLUDED.snapshot_seq, updated_at = now()
 WHERE (topics.message_count, topics.snapshot_seq) < (EXCLUDED.message_count, EXCLUDED.snapshot_seq)
"""
# The newest snapshot wins: every assignment counts one message more, also a late message's
# (a seq the fold passed over, placed after newer ones: docs/topics.md), whose seq is lower.
# Never re-add a message the archive already holds (a re-asserted assignment after a crash).
_INSERT_MESSAGE = f"""
INSERT INTO topic_messages (tenant_id, conversation_id, seq, topic_id, role, content, occurred_at, similarity,
                            matched, event_id)
SELECT %(tenant)s, %(conversation)s, %(seq)s, %(topic)s, %(role)s, %(content)s, %(occurred_at)s, %(similarity)s,
       %(matched)s, %(event_id)s
 WHERE NOT EXISTS (SELECT 1 FROM topics WHERE {_TOPIC} AND summary_upto_seq >= %(seq)s)
ON CONFLICT DO NOTHING
"""
# One statement (one round trip): the sub-statements share a snapshot, and the message's
# foreign key to its topic is checked at the end of the statement, after the upsert.
_ASSIGNED = f"""
WITH snapshot AS ({_UPSERT_SNAPSHOT}), message AS ({_INSERT_MESSAGE})
INSERT INTO topic_conversations (tenant_id, conversation_id, last_seq) VALUES (%(tenant)s, %(conversation)s, %(seq)s)
ON CONFLICT (tenant_id, conversation_id) DO UPDATE
   SET last_seq = GREATEST(topic_conversations.last_seq, EXCLUDED.last_seq), updated_at = now()
"""
# A re-sent assignment without text (the fold keeps none): role, text and time from the log.
_ASSIGNED_FROM_LOG = f"""
WITH snapshot AS ({_UPSERT_SNAPSHOT}), message AS (
    INSERT INTO topic_messages (tenant_id, conversation_id, seq, topic_id, role, content, occurred_at, similarity,
                                matched, event_id)
    SELECT m.tenant_id, m.conversation_id, m.seq, %(topic)s, m.role, m.content, m.occurred_at, NULL, true,
           %(event_id)s
      FROM messages m
     WHERE m.tenant_id = %(tenant)s AND m.conversation_id = %(conversation)s AND m.seq = %(seq)s
       AND NOT EXISTS (SELECT 1 FROM topics WHERE {_TOPIC} AND summary_upto_seq >= %(seq)s)
    ON CONFLICT DO NOTHING)
INSERT INTO topic_conversations (tenant_id, conversation_id, last_seq) VALUES (%(tenant)s, %(conversation)s, %(seq)s)
ON CONFLICT (tenant_id, conversation_id) DO UPDATE
   SET last_seq = GREATEST(topic_conversations.last_seq, EXCLUDED.last_seq), updated_at = now()
"""
_PLACED = """
INSERT INTO topic_conversations (tenant_id, conversation_id, last_seq) VALUES (%(tenant)s, %(conversation)s, %(seq)s)
ON CONFLICT (tenant_id, conversation_id) DO UPDATE
   SET last_seq = GREATEST(topic_conversations.last_seq, EXCLUDED.last_seq), updated_at = now()
"""
_ACTIVATE = """
INSERT INTO topic_conversations (tenant_id, conversation_id, active_topic_id, activated_seq)
VALUES (%(tenant)s, %(conversation)s, %(topic)s, %(seq)s)
ON CONFLICT (tenant_id, conversation_id) DO UPDATE
   SET active_topic_id = EXCLUDED.active_topic_id, activated_seq = EXCLUDED.activated_seq, updated_at = now()
 WHERE topic_conversations.activated_seq IS NULL OR topic_conversations.activated_seq < EXCLUDED.activated_seq
RETURNING 1
"""


class TopicsProjector:
    """Invalid records of the memory topic are dead-lettered by the memory projector, not here."""

    name = "topics"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def topics(self, settings: Settings) -> list[str]:
        return [settings.kafka.memory_topic(settings.generation)]

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
        return await self.apply_events(conn, events_of(records, PROJECTED, Limits.of(self.settings)))

    async def apply_events(self, conn: psycopg.AsyncConnection, events: Sequence[Event]) -> list[DeadLetter]:
        """`apply` for events decoded already (the batch replay decodes once for two projectors)."""
        events = [event for event in events if event.type in PROJECTED]
        if events:
            # Pipelined: statements go out without waiting for each answer (a read syncs).
            async with conn.pipeline():
                for event in events:
                    await _APPLY[event.type](conn, event, _params(event))
        return []


def _params(event: Event) -> dict:
    e, p = event.envelope, event.payload
    return {"tenant": e.tenant_id, "conversation": e.conversation_id, "topic": getattr(p, "topic_id", None),
            "event_id": e.event_id}


async def _created(conn, event: Event, q: dict) -> None:
    p = event.payload
    await conn.execute(
        "INSERT INTO topics (tenant_id, conversation_id, topic_id, title, first_seq, importance, created_at,"
        " last_active_at, created_event_id) VALUES (%(tenant)s, %(conversation)s, %(topic)s, %(title)s, %(seq)s,"
        " %(importance)s, %(created_at)s, %(created_at)s, %(event_id)s) ON CONFLICT DO NOTHING",
        q | {"title": p.title, "seq": p.seq, "importance": p.importance, "created_at": p.created_at},
    )


async def _assigned(conn, event: Event, q: dict) -> None:
    p, t = event.payload, event.payload.topic
    q |= {"seq": p.seq, "title": t.title, "importance": t.importance, "access_count": t.access_count,
          "message_count": t.message_count, "created_at": t.created_at, "last_active_at": t.last_active_at,
          "role": p.role, "content": p.content, "occurred_at": p.occurred_at, "similarity": p.similarity,
          "matched": p.matched}
    # Without the text (a re-sent assignment) and not in the log yet: the compaction that
    # archives the message takes it from the log then (see _compacted).
    await conn.execute(_ASSIGNED_FROM_LOG if p.content_from_log else _ASSIGNED, q)


async def _unassigned(conn, event: Event, q: dict) -> None:
    q |= {"seq": event.payload.seq, "reason": event.payload.reason}
    await conn.execute(
        "INSERT INTO topic_unassigned (tenant_id, conversation_id, seq, reason, event_id)"
        " VALUES (%(tenant)s, %(conversation)s, %(seq)s, %(reason)s, %(event_id)s) ON CONFLICT DO NOTHING", q)
    await conn.execute(_PLACED, q)


async def _activated(conn, event: Event, q: dict) -> None:
    q |= {"seq": event.payload.seq}
    cur = await conn.execute(_ACTIVATE, q)
    if await cur.fetchone() is None:
        return  # an older activation replayed: the newer one already holds
    # A deactivated topic's restore ends with it.
    await conn.execute(
        "UPDATE topics SET active = (topic_id = %(topic)s),"
        " restored_at_seq = CASE WHEN topic_id = %(topic)s THEN restored_at_seq END,"
        " restore_cleared_seq = CASE WHEN topic_id = %(topic)s THEN restore_cleared_seq"
        " ELSE GREATEST(restore_cleared_seq, %(seq)s) END, updated_at = now()"
        f" WHERE {_KEY} AND (active OR topic_id = %(topic)s)", q)


async def _restore(conn, event: Event, q: dict) -> None:
    await conn.execute(
        f"UPDATE topics SET restored_at_seq = %(seq)s, updated_at = now() WHERE {_TOPIC}"
        " AND restore_cleared_seq < %(seq)s AND (restored_at_seq IS NULL OR restored_at_seq < %(seq)s)",
        q | {"seq": event.payload.seq})


async def _compaction_requested(conn, event: Event, q: dict) -> None:
    p = event.payload
    await conn.execute(
        f"UPDATE topics SET compaction_status = 'requested', compaction_attempt = %(attempt)s, updated_at = now()"
        f" WHERE {_TOPIC} AND summary_upto_seq < %(upto)s AND coalesce(compaction_attempt, 0) <= %(attempt)s",
        q | {"attempt": p.attempt, "upto": p.upto_seq})


async def _compaction_failed(conn, event: Event, q: dict) -> None:
    p = event.payload
    await conn.execute(
        f"UPDATE topics SET compaction_status = 'failed', compaction_error = %(error)s, updated_at = now()"
        f" WHERE {_TOPIC} AND summary_upto_seq < %(upto)s AND coalesce(compaction_attempt, 0) <= %(attempt)s",
        q | {"error": p.error, "upto": p.upto_seq, "attempt": p.attempt})


async def _evicted(conn, event: Event, q: dict) -> None:
    p = event.payload
    await conn.execute(
        f"UPDATE topics SET evicted_at = %(at)s, evicted_priority = %(priority)s, evicted_reason = %(reason)s,"
        " active = false, restored_at_seq = NULL, restore_cleared_seq = GREATEST(restore_cleared_seq, %(seq)s),"
        f" updated_at = now() WHERE {_TOPIC} AND evicted_at IS NULL",
        q | {"at": p.evicted_at, "priority": p.priority, "reason": p.reason, "seq": event.envelope.seq or 0})


async def _compacted(conn, event: Event, q: dict) -> None:
    """Archive and summary in one go: the moved messages leave topic_messages for the archive."""
    p = event.payload
    q |= {"upto": p.upto_seq}
    cur = await conn.execute(f"SELECT summary_upto_seq FROM topics WHERE {_TOPIC} FOR UPDATE", q)
    row = await cur.fetchone()
    if row is None or row[0] >= p.upto_seq:
        if row is None:
            log.warning("topic.compacted for unknown topic %s", p.topic_id)
        return  # already applied (redelivery, replay)
    # Exactly the request's messages: a late one (placed after the compaction was decided) stays
    # active for the next compaction, as in the fold (docs/topics.md, "Compaction").
    q |= {"archived": list(p.archived_seqs)}
    cur = await conn.execute(
        f"SELECT seq, role, content, occurred_at FROM topic_messages WHERE {_TOPIC} AND seq = ANY(%(archived)s)", q)
    moving = [TopicMessage(seq, role, content, at.timestamp()) for seq, role, content, at in await cur.fetchall()]
    missing = sorted(set(p.archived_seqs) - {m.seq for m in moving})
    if missing:  # placed before a crash whose assignment event was lost: the log still has them
        log.warning("topic %s: archiving %s from the messages table", p.topic_id, missing)
        cur = await conn.execute(
            f"SELECT seq, role, content, occurred_at FROM messages WHERE {_KEY} AND seq = ANY(%(seqs)s)",
            q | {"seqs": missing})
        moving += [TopicMessage(s, r, c, at.timestamp()) for s, r, c, at in await cur.fetchall()]
    cur = await conn.execute(f"SELECT archive FROM topic_archives WHERE {_TOPIC} FOR UPDATE", q)
    old = await cur.fetchone()
    merged = merge_messages(old[0] if old else None, moving)
    if merged:
        packed = compress_bytes(merged)
        await conn.execute(
            "INSERT INTO topic_archives (tenant_id, conversation_id, topic_id, archive, message_count, first_seq,"
            " last_seq, json_bytes, gzip_bytes) VALUES (%(tenant)s, %(conversation)s, %(topic)s, %(archive)s,"
            " %(count)s, %(first)s, %(last)s, %(json)s, %(gzip)s) ON CONFLICT (tenant_id, conversation_id, topic_id)"
            " DO UPDATE SET archive = EXCLUDED.archive, message_count = EXCLUDED.message_count,"
            " first_seq = EXCLUDED.first_seq, last_seq = EXCLUDED.last_seq, json_bytes = EXCLUDED.json_bytes,"
            " gzip_bytes = EXCLUDED.gzip_bytes, updated_at = now()",
            q | {"archive": packed, "count": len(merged), "first": merged[0].seq, "last": merged[-1].seq,
                 "json": len(to_json_bytes(merged)), "gzip": len(packed)})
    await conn.execute(f"DELETE FROM topic_messages WHERE {_TOPIC} AND seq = ANY(%(archived)s)", q)
    # A restore ends when a compaction requested at or after it (the envelope's seq: the fold's
    # position when it asked) re-archives what was brought back, as seed 004's next compaction does.
    await conn.execute(
        f"UPDATE topics SET summary = %(summary)s, summary_upto_seq = %(upto)s, summary_model = %(model)s,"
        " summary_prompt_version = %(prompt)s, compaction_status = 'completed', compactions = compactions + 1,"
        " restored_at_seq = CASE WHEN restored_at_seq <= %(asked)s THEN NULL ELSE restored_at_seq END,"
        f" restore_cleared_seq = GREATEST(restore_cleared_seq, %(asked)s), updated_at = now() WHERE {_TOPIC}",
        q | {"summary": p.summary, "model": p.model, "prompt": p.prompt_version,
             "asked": event.envelope.seq if event.envelope.seq is not None else p.upto_seq})


_APPLY = {
    te.TOPIC_CREATED: _created, te.TOPIC_MESSAGE_ASSIGNED: _assigned, te.TOPIC_MESSAGE_UNASSIGNED: _unassigned,
    te.TOPIC_ACTIVATED: _activated, te.TOPIC_ARCHIVE_RESTORE_REQUESTED: _restore,
    te.TOPIC_COMPACTION_REQUESTED: _compaction_requested, te.TOPIC_COMPACTED: _compacted,
    te.TOPIC_COMPACTION_FAILED: _compaction_failed, te.TOPIC_EVICTED: _evicted,
}


def projectors(settings: Settings) -> list:
    """The projectors this system runs in the worker."""
    return [TopicsProjector(settings)]

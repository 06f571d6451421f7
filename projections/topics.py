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
from domain.topics.archive import merge_messages, pack_bytes
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
_UNASSIGNED_SEQ = "tenant_id = %(tenant)s AND conversation_id = %(conversation)s AND seq = %(seq)s"
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
# A deactivated topic's restore ends with it. Only when the activation above changed the row (an
# older activation replayed finds the newer one holding): one statement, so no answer to wait for.
_ACTIVATED = f"""
WITH activated AS ({_ACTIVATE})
UPDATE topics SET active = (topic_id = %(topic)s),
       restored_at_seq = CASE WHEN topic_id = %(topic)s THEN restored_at_seq END,
       restore_cleared_seq = CASE WHEN topic_id = %(topic)s THEN restore_cleared_seq
                                  ELSE GREATEST(restore_cleared_seq, %(seq)s) END, updated_at = now()
 WHERE {_KEY} AND (active OR topic_id = %(topic)s) AND EXISTS (SELECT 1 FROM activated)
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
        """`apply` for events decoded already (the batch replay decodes once for two projectors).

        In rounds (`rounds`): round k applies the k-th step of every conversation of the batch at
        once, a step being a run of assignments (a few statements for the whole round, each
        what the per-event statements would leave: `_assigned_many`), one compaction (the
        round's compactions read and write together: `_compacted_many`) or one other event.
        Every row is keyed by its conversation, so the order of different conversations'
        events changes nothing; each conversation's stay in log order. Pipelined: statements go
        out without waiting for each answer; only a round's compactions wait, for their reads."""
        steps = rounds([event for event in events if event.type in PROJECTED])
        if not steps:
            return []
        async with conn.pipeline():
            for step in steps:
                runs = [event for part in step if _in_run(part[0]) for event in part]
                compacted = [part[0] for part in step if part[0].type == te.TOPIC_COMPACTED]
                if runs:
                    await _assigned_many(conn, runs)
                if compacted:
                    await _compacted_many(conn, compacted)
                for part in step:
                    event = part[0]
                    if not _in_run(event) and event.type != te.TOPIC_COMPACTED:
                        await _APPLY[event.type](conn, event, _params(event))
        return []


def _in_run(event: Event) -> bool:
    """An assignment with its text: consecutive ones of a conversation are applied together."""
    return event.type == te.TOPIC_MESSAGE_ASSIGNED and not event.payload.content_from_log


def rounds(events: Sequence[Event]) -> list[list[list[Event]]]:
    """Each conversation's events (in order) cut into steps: a run of assignments with their text
    (`_in_run`), or one other event. Round k holds the k-th step of every conversation that has
    one, so a round has at most one step per conversation."""
    steps: dict[tuple[str, str], list[list[Event]]] = {}
    for event in events:
        mine = steps.setdefault((event.envelope.tenant_id, event.envelope.conversation_id), [])
        if mine and _in_run(event) and _in_run(mine[-1][-1]):
            mine[-1].append(event)
        else:
            mine.append([event])
    depth = max((len(mine) for mine in steps.values()), default=0)
    return [[mine[k] for mine in steps.values() if k < len(mine)] for k in range(depth)]


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


def _assigned_params(event: Event) -> dict:
    p, t = event.payload, event.payload.topic
    return _params(event) | {
        "seq": p.seq, "title": t.title, "importance": t.importance, "access_count": t.access_count,
        "message_count": t.message_count, "created_at": t.created_at, "last_active_at": t.last_active_at,
        "role": p.role, "content": p.content, "occurred_at": p.occurred_at, "similarity": p.similarity,
        "matched": p.matched}


async def _assigned(conn, event: Event, q: dict) -> None:
    # Without the text (a re-sent assignment) and not in the log yet: the compaction that
    # archives the message takes it from the log then (see _compacted).
    q = _assigned_params(event)
    await conn.execute(_ASSIGNED_FROM_LOG if event.payload.content_from_log else _ASSIGNED, q)
    if event.payload.content_from_log:  # a reply first left unassigned, placed later (issue 22): one row, not two
        await conn.execute(f"DELETE FROM topic_unassigned WHERE {_UNASSIGNED_SEQ}", q)


# The messages of many assignments in one statement, in their order (the first copy of a seq
# wins, as one statement per assignment would have it). The arrays go as binary parameters (`%b`):
# in text every element is quoted and escaped in Python, ~2.5x the CPU (docs/scaling.md, stub12).
_INSERT_MESSAGES = """
INSERT INTO topic_messages (tenant_id, conversation_id, seq, topic_id, role, content, occurred_at, similarity,
                            matched, event_id)
SELECT m.tenant_id, m.conversation_id, m.seq, m.topic_id, m.role, m.content, m.occurred_at, m.similarity, m.matched,
       m.event_id
  FROM unnest(%(tenant)b::text[], %(conversation)b::text[], %(seq)b::integer[], %(topic)b::text[], %(role)b::text[],
              %(content)b::text[], %(occurred_at)b::timestamptz[], %(similarity)b::double precision[],
              %(matched)b::boolean[], %(event_id)b::text[])
       WITH ORDINALITY AS m(tenant_id, conversation_id, seq, topic_id, role, content, occurred_at, similarity,
                            matched, event_id, n)
 WHERE NOT EXISTS (SELECT 1 FROM topics t WHERE t.tenant_id = m.tenant_id AND t.conversation_id = m.conversation_id
                      AND t.topic_id = m.topic_id AND t.summary_upto_seq >= m.seq)
 ORDER BY m.n
ON CONFLICT DO NOTHING
"""
_MESSAGE_COLUMNS = ("tenant", "conversation", "seq", "topic", "role", "content", "occurred_at", "similarity",
                    "matched", "event_id")


async def _assigned_many(conn, events: Sequence[Event]) -> None:
    """Assignments with their text, several conversations' runs at once, leaving the rows that
    `_ASSIGNED` per event in order leaves: per topic the snapshot upsert of its first assignment
    (the row it creates), then of its newest snapshot (`_newest`: the upsert keeps the greatest
    (message_count, snapshot_seq), so the others in between change nothing that lasts); the
    messages in one statement whose topics' summaries all stand as before the run (nothing in a
    run compacts); per conversation the placement upsert of its highest seq (GREATEST)."""
    params = [_assigned_params(event) for event in events]
    first: dict[tuple, dict] = {}
    newest: dict[tuple, dict] = {}
    for q in params:
        key = (q["tenant"], q["conversation"], q["topic"])
        first.setdefault(key, q)
        newest[key] = _newest(newest.get(key), q)
    placed: dict[tuple, dict] = {}
    for q in params:
        key = (q["tenant"], q["conversation"])
        if key not in placed or placed[key]["seq"] < q["seq"]:
            placed[key] = q
    async with conn.cursor() as cur:
        await cur.executemany(_UPSERT_SNAPSHOT, list(first.values()))
        later = [q for key, q in newest.items() if q is not first[key]]
        if later:
            await cur.executemany(_UPSERT_SNAPSHOT, later)
        await cur.execute(_INSERT_MESSAGES, {c: [q[c] for q in params] for c in _MESSAGE_COLUMNS})
        await cur.executemany(_PLACED, list(placed.values()))


def _newest(held: dict | None, q: dict) -> dict:
    """The snapshot the upsert keeps of two: the greater (message_count, seq); the earlier on a tie."""
    if held is None or (held["message_count"], held["seq"]) < (q["message_count"], q["seq"]):
        return q
    return held


async def _unassigned(conn, event: Event, q: dict) -> None:
    q |= {"seq": event.payload.seq, "reason": event.payload.reason}
    await conn.execute(
        "INSERT INTO topic_unassigned (tenant_id, conversation_id, seq, reason, event_id)"
        " VALUES (%(tenant)s, %(conversation)s, %(seq)s, %(reason)s, %(event_id)s) ON CONFLICT DO NOTHING", q)
    await conn.execute(_PLACED, q)


async def _activated(conn, event: Event, q: dict) -> None:
    await conn.execute(_ACTIVATED, q | {"seq": event.payload.seq})


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


_ARCHIVE = (
    "INSERT INTO topic_archives (tenant_id, conversation_id, topic_id, archive, message_count, first_seq,"
    " last_seq, json_bytes, gzip_bytes) VALUES (%(tenant)s, %(conversation)s, %(topic)s, %(archive)s,"
    " %(count)s, %(first)s, %(last)s, %(json)s, %(gzip)s) ON CONFLICT (tenant_id, conversation_id, topic_id)"
    " DO UPDATE SET archive = EXCLUDED.archive, message_count = EXCLUDED.message_count,"
    " first_seq = EXCLUDED.first_seq, last_seq = EXCLUDED.last_seq, json_bytes = EXCLUDED.json_bytes,"
    " gzip_bytes = EXCLUDED.gzip_bytes, updated_at = now()")
_UNARCHIVED = f"DELETE FROM topic_messages WHERE {_TOPIC} AND seq = ANY(%(archived)s)"
# A restore ends when a compaction requested at or after it (the envelope's seq: the fold's
# position when it asked) re-archives what was brought back, as seed 004's next compaction does.
_SUMMARIZED = (
    "UPDATE topics SET summary = %(summary)s, summary_upto_seq = %(upto)s, summary_model = %(model)s,"
    " summary_prompt_version = %(prompt)s, compaction_status = 'completed', compactions = compactions + 1,"
    " restored_at_seq = CASE WHEN restored_at_seq <= %(asked)s THEN NULL ELSE restored_at_seq END,"
    f" restore_cleared_seq = GREATEST(restore_cleared_seq, %(asked)s), updated_at = now() WHERE {_TOPIC}")
# Keyed rows of several topics at once: (tenant, conversation, topic[, seq]) arrays, unnested.
_KEYS = "unnest(%s::text[], %s::text[], %s::text[]) AS k(tenant_id, conversation_id, topic_id)"
_SEQ_KEYS = "unnest(%s::text[], %s::text[], %s::text[], %s::integer[]) AS k(tenant_id, conversation_id, topic_id, seq)"
_SAME_TOPIC = "x.tenant_id = k.tenant_id AND x.conversation_id = k.conversation_id AND x.topic_id = k.topic_id"


async def _compacted(conn, event: Event, q: dict) -> None:
    await _compacted_many(conn, [event])


async def _compacted_many(conn, events: Sequence[Event]) -> None:
    """Archive and summary in one go: the moved messages leave topic_messages for the archive.
    Several compactions at once, at most one per topic (a round of `rounds`): each read for all
    of them in one statement, each write as it would be for one."""
    params = []
    for event in events:
        p = event.payload
        # Exactly the request's messages: a late one (placed after the compaction was decided) stays
        # active for the next compaction, as in the fold (docs/topics.md, "Compaction").
        params.append(_params(event) | {
            "upto": p.upto_seq, "archived": list(p.archived_seqs), "summary": p.summary, "model": p.model,
            "prompt": p.prompt_version, "asked": event.envelope.seq if event.envelope.seq is not None else p.upto_seq})
    # The round's three reads sent together, answered in one round trip: the topics (locked), the
    # messages they archive, their archives (locked).
    keys = [[q[c] for q in params] for c in ("tenant", "conversation", "topic")]
    wanted = [(q["tenant"], q["conversation"], q["topic"], seq) for q in params for seq in q["archived"]]
    topics = await conn.execute(
        f"SELECT x.tenant_id, x.conversation_id, x.topic_id, x.summary_upto_seq FROM topics x JOIN {_KEYS}"
        f" ON {_SAME_TOPIC} FOR UPDATE OF x", keys)
    active = await conn.execute(
        f"SELECT x.tenant_id, x.conversation_id, x.topic_id, x.seq, x.role, x.content, x.occurred_at"
        f" FROM topic_messages x JOIN {_SEQ_KEYS} ON {_SAME_TOPIC} AND x.seq = k.seq", [list(c) for c in zip(*wanted)])
    archived = await conn.execute(
        f"SELECT x.tenant_id, x.conversation_id, x.topic_id, x.archive FROM topic_archives x JOIN {_KEYS}"
        f" ON {_SAME_TOPIC} FOR UPDATE OF x", keys)
    upto = {tuple(row[:3]): row[3] for row in await topics.fetchall()}
    moving: dict[tuple, list[TopicMessage]] = {}
    for tenant, conversation, topic, seq, role, content, at in await active.fetchall():
        moving.setdefault((tenant, conversation, topic), []).append(TopicMessage(seq, role, content, at.timestamp()))
    old = {tuple(row[:3]): row[3] for row in await archived.fetchall()}
    due = []
    for q in params:
        held = upto.get((q["tenant"], q["conversation"], q["topic"]))
        if held is None:
            log.warning("topic.compacted for unknown topic %s", q["topic"])
        elif held < q["upto"]:  # else already applied (redelivery, replay)
            due.append(q)
    if not due:
        return
    lost = []
    for q in due:
        key = (q["tenant"], q["conversation"], q["topic"])
        missing = sorted(set(q["archived"]) - {m.seq for m in moving.get(key, ())})
        if missing:  # placed before a crash whose assignment event was lost: the log still has them
            log.warning("topic %s: archiving %s from the messages table", q["topic"], missing)
            lost += [(*key, seq) for seq in missing]
    if lost:
        cur = await conn.execute(
            f"SELECT k.tenant_id, k.conversation_id, k.topic_id, x.seq, x.role, x.content, x.occurred_at"
            f" FROM messages x JOIN {_SEQ_KEYS} ON x.tenant_id = k.tenant_id AND x.conversation_id = k.conversation_id"
            " AND x.seq = k.seq", [list(c) for c in zip(*lost)])
        for tenant, conversation, topic, seq, role, content, at in await cur.fetchall():
            moving.setdefault((tenant, conversation, topic), []).append(
                TopicMessage(seq, role, content, at.timestamp()))
    archives = []
    for q in due:
        key = (q["tenant"], q["conversation"], q["topic"])
        merged = merge_messages(old.get(key), moving.get(key, ()))
        if merged:
            packed, json_bytes = pack_bytes(merged)
            archives.append(q | {"archive": packed, "count": len(merged), "first": merged[0].seq,
                                 "last": merged[-1].seq, "json": json_bytes, "gzip": len(packed)})
    async with conn.cursor() as cur:
        if archives:
            await cur.executemany(_ARCHIVE, archives)
        await cur.executemany(_UNARCHIVED, due)
        await cur.executemany(_SUMMARIZED, due)


_APPLY = {
    te.TOPIC_CREATED: _created, te.TOPIC_MESSAGE_ASSIGNED: _assigned, te.TOPIC_MESSAGE_UNASSIGNED: _unassigned,
    te.TOPIC_ACTIVATED: _activated, te.TOPIC_ARCHIVE_RESTORE_REQUESTED: _restore,
    te.TOPIC_COMPACTION_REQUESTED: _compaction_requested, te.TOPIC_COMPACTED: _compacted,
    te.TOPIC_COMPACTION_FAILED: _compaction_failed, te.TOPIC_EVICTED: _evicted,
}


def projectors(settings: Settings) -> list:
    """The projectors this system runs in the worker."""
    return [TopicsProjector(settings)]

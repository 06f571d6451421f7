"""Lineage projectors (docs/lineage.md): the topic history that the topic tables overwrite
(assignments, activations, every compaction) and the contexts the API served. Idempotent:
every row is keyed by what the event names, so redelivery or replay changes nothing."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from aiokafka.structs import ConsumerRecord
from psycopg.types.json import Jsonb

from domain.lineage import served_topic
from core.settings import Settings
from runtime.dead_letter import DeadLetter
from projections.decoding import events_of
from schemas import topic_events as te
from schemas.codec import Event, decode
from schemas.envelope import InvalidEvent
from schemas.lineage_events import CONTEXT_SERVED
from schemas.limits import Limits

_TOPIC_TYPES = frozenset({te.TOPIC_MESSAGE_ASSIGNED, te.TOPIC_ACTIVATED, te.TOPIC_COMPACTED})


class TopicLineageProjector:
    """Reads the generation's memory topic; invalid records there are the memory projector's
    to dead-letter, so they are skipped here."""

    name = "lineage-topics"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def topics(self, settings: Settings) -> list[str]:
        return [settings.kafka.memory_topic(settings.generation)]

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
        return await self.apply_events(conn, events_of(records, _TOPIC_TYPES, Limits.of(self.settings)))

    async def apply_events(self, conn: psycopg.AsyncConnection, events: Sequence[Event]) -> list[DeadLetter]:
        """`apply` for events decoded already (the batch replay decodes once for two projectors).
        The assignments (most of them) in one statement; each table's rows in the events' order,
        so a redelivered event finds its row as one statement per event would (the tables are
        independent: every statement only inserts)."""
        assigned = [event for event in events if event.type == te.TOPIC_MESSAGE_ASSIGNED]
        if assigned:
            await _assigned_many(conn, assigned)
        async with conn.pipeline():
            for event in events:
                if event.type in _TOPIC_TYPES and event.type != te.TOPIC_MESSAGE_ASSIGNED:
                    await _TOPIC_APPLY[event.type](conn, event)
        return []


_ASSIGNED_MANY = """
INSERT INTO topic_assignments (tenant_id, conversation_id, seq, topic_id, matched, similarity, event_id)
SELECT a.tenant_id, a.conversation_id, a.seq, a.topic_id, a.matched, a.similarity, a.event_id
  FROM unnest(%s::text[], %s::text[], %s::integer[], %s::text[], %s::boolean[], %s::double precision[], %s::text[])
       WITH ORDINALITY AS a(tenant_id, conversation_id, seq, topic_id, matched, similarity, event_id, n)
 ORDER BY a.n
ON CONFLICT DO NOTHING
"""


async def _assigned_many(conn: psycopg.AsyncConnection, events: Sequence[Event]) -> None:
    """`_assigned` of many events in one statement (the first of a seq wins, as in order)."""
    rows = [_assignment(event) for event in events]
    await conn.execute(_ASSIGNED_MANY, [list(column) for column in zip(*rows)])


def _assignment(event: Event) -> tuple:
    e, p = event.envelope, event.payload
    return e.tenant_id, e.conversation_id, p.seq, p.topic_id, p.matched, p.similarity, e.event_id


async def _assigned(conn: psycopg.AsyncConnection, event: Event) -> None:
    await _assigned_many(conn, [event])


async def _activated(conn: psycopg.AsyncConnection, event: Event) -> None:
    e, p = event.envelope, event.payload
    await conn.execute(
        "INSERT INTO topic_activations (tenant_id, conversation_id, seq, topic_id, event_id)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (e.tenant_id, e.conversation_id, p.seq, p.topic_id, e.event_id))


async def _compacted(conn: psycopg.AsyncConnection, event: Event) -> None:
    e, p = event.envelope, event.payload
    await conn.execute(
        "INSERT INTO topic_compactions (tenant_id, conversation_id, topic_id, upto_seq, archived_seqs, summary,"
        " prompt_version, model, generation_time_ms, event_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        (e.tenant_id, e.conversation_id, p.topic_id, p.upto_seq, p.archived_seqs, p.summary, p.prompt_version,
         p.model, p.generation_time_ms, e.event_id))


_TOPIC_APPLY = {te.TOPIC_MESSAGE_ASSIGNED: _assigned, te.TOPIC_ACTIVATED: _activated, te.TOPIC_COMPACTED: _compacted}


class ServedContextProjector:
    """context.served -> served_contexts. A record that is not a valid context.served event
    is dead-lettered with the reason; the others are applied."""

    name = "lineage-served"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def topics(self, settings: Settings) -> list[str]:
        return [served_topic(settings)]

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
        letters: list[DeadLetter] = []
        rows = []
        for record in records:
            try:
                event = decode(record.value, key=record.key, limits=Limits.of(self.settings))
            except InvalidEvent as error:
                if error.reason == "erased":
                    continue  # a served query sealed with a destroyed key: skipped
                letters.append(DeadLetter(record, error.reason, error.detail))
                continue
            if event.type != CONTEXT_SERVED:
                letters.append(DeadLetter(record, "unknown_type", f"{event.type} on the context-served topic"))
                continue
            rows.append(_served_row(event, record))
        if rows:
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO served_contexts (event_id, tenant_id, conversation_id, user_id, subject_id, turn_seq,"
                    " served_at, summary_memory_id, gap_from_seq, gap_to_seq, active_topic_id, payload,"
                    " source_partition, source_offset) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (event_id) DO NOTHING", rows)
        return letters


def _served_row(event: Event, record: ConsumerRecord) -> tuple:
    e, p = event.envelope, event.payload
    gap = p.gap_seqs
    return (e.event_id, e.tenant_id, e.conversation_id, e.user_id, e.subject_id, p.turn_seq, p.served_at,
            p.summary.memory_id if p.summary else None, gap[0] if gap else None, gap[-1] if gap else None,
            p.active_topic.topic_id if p.active_topic else None, Jsonb(p.model_dump(mode="json")),
            record.partition, record.offset)


def projectors(settings: Settings) -> list:
    """Always run: the served record does not depend on a memory system; the topic history
    is empty when the topics system is off."""
    return [TopicLineageProjector(settings), ServedContextProjector(settings)]

"""Projects summary lifecycle events into seed 000's `memory` table (idempotent)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg
from aiokafka.structs import ConsumerRecord

from memory_agent.settings import Settings
from projections.dead_letter import DeadLetter
from schemas.codec import decode
from schemas.envelope import InvalidEvent
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_FAILED, SUMMARY_REQUESTED

log = logging.getLogger(__name__)

_REQUESTED = """
INSERT INTO memory (tenant_id, conversation_id, memory_id, start_sequence, end_sequence, base_memory_id,
                    attempt, prompt_version, model, request_event_id)
VALUES (%(tenant)s, %(conversation)s, %(memory_id)s, %(start)s, %(end)s, %(base)s, %(attempt)s,
        %(prompt_version)s, %(model)s, %(event_id)s)
ON CONFLICT (tenant_id, conversation_id, memory_id) DO UPDATE
   SET attempt = GREATEST(memory.attempt, EXCLUDED.attempt), updated_at = now()
 WHERE memory.status = 'processing' AND EXCLUDED.attempt > memory.attempt
"""

# First completion wins; a second completed row for the same window is impossible.
_COMPLETED = """
UPDATE memory m
   SET status = 'completed', memory_text = %(text)s, generation_time_ms = %(ms)s, model = %(model)s,
       prompt_version = %(prompt_version)s, source_event_ids = %(sources)s, result_event_id = %(event_id)s,
       completed_at = now(), updated_at = now()
 WHERE m.tenant_id = %(tenant)s AND m.conversation_id = %(conversation)s AND m.memory_id = %(memory_id)s
   AND m.status = 'processing'
   AND NOT EXISTS (SELECT 1 FROM memory o
                    WHERE o.tenant_id = m.tenant_id AND o.conversation_id = m.conversation_id
                      AND o.status = 'completed' AND o.start_sequence = m.start_sequence
                      AND o.end_sequence = m.end_sequence AND o.prompt_version = %(prompt_version)s)
"""

_FAILED = """
UPDATE memory SET status = 'failed', error = %(error)s, result_event_id = %(event_id)s, updated_at = now()
 WHERE tenant_id = %(tenant)s AND conversation_id = %(conversation)s AND memory_id = %(memory_id)s
   AND status = 'processing'
"""


class MemoryProjector:
    name = "memory"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def topics(self, settings: Settings) -> list[str]:
        return [settings.kafka.memory_topic(settings.generation)]

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
        letters = []
        for record in records:
            try:
                event = decode(record.value, max_event_bytes=self.settings.kafka.max_event_bytes)
            except InvalidEvent as exc:
                letters.append(DeadLetter(record, exc.reason, exc.detail))
                continue
            if event.type not in (SUMMARY_REQUESTED, SUMMARY_COMPLETED, SUMMARY_FAILED):
                continue
            e, p = event.envelope, event.payload
            params = {
                "tenant": e.tenant_id, "conversation": e.conversation_id, "memory_id": p.memory_id,
                "event_id": e.event_id, "prompt_version": p.prompt_version, "model": p.model,
            }
            if event.type == SUMMARY_REQUESTED:
                params.update(start=p.start_seq, end=p.end_seq, base=p.base_memory_id, attempt=p.attempt)
                await conn.execute(_REQUESTED, params)
            elif event.type == SUMMARY_COMPLETED:
                params.update(text=p.text, ms=p.generation_time_ms, sources=p.source_event_ids)
                await conn.execute(_COMPLETED, params)
            else:
                params.update(error=p.error)
                await conn.execute(_FAILED, params)
        return letters

"""Projects summary lifecycle events into seed 000's `memory` table (idempotent)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import psycopg
from aiokafka.structs import ConsumerRecord

from core.settings import Settings
from runtime.db import copy_insert
from runtime.dead_letter import DeadLetter
from schemas.codec import Event
from projections.decoding import decode_record
from schemas.limits import Limits
from schemas.envelope import InvalidEvent
from schemas.registry import SUMMARY_COMPLETED, SUMMARY_FAILED, SUMMARY_REQUESTED

log = logging.getLogger(__name__)

_REQUESTED = """
INSERT INTO memory (tenant_id, conversation_id, memory_id, start_sequence, end_sequence, base_memory_id,
                    attempt, prompt_version, model, request_event_id)
VALUES (%(tenant)s, %(conversation)s, %(memory_id)s, %(start)s, %(end)s, %(base)s, %(attempt)s,
        %(prompt_version)s, %(model)s, %(event_id)s)
ON CONFLICT (tenant_id, conversation_id, memory_id) DO UPDATE
   SET attempt = GREATEST(memory.attempt, EXCLUDED.attempt), status = 'processing', error = NULL,
       result_event_id = NULL, updated_at = now()
 WHERE memory.status <> 'completed' AND EXCLUDED.attempt > memory.attempt
"""
# A re-issued attempt revives a row failed by an older attempt: the fold re-issued it before
# that failure reached it (and ignores the failure), so the newer attempt is what counts.

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

# As in the fold: a failure of an attempt that was already re-issued says nothing about the
# newer attempt (which may still complete: the fold would then chain on it).
_FAILED = """
UPDATE memory SET status = 'failed', error = %(error)s, result_event_id = %(event_id)s, updated_at = now()
 WHERE tenant_id = %(tenant)s AND conversation_id = %(conversation)s AND memory_id = %(memory_id)s
   AND status = 'processing' AND attempt <= %(attempt)s
"""


_SETTLED_COLUMNS = (
    "tenant_id, conversation_id, memory_id, start_sequence, end_sequence, base_memory_id, attempt, prompt_version,"
    " model, request_event_id, status, memory_text, generation_time_ms, source_event_ids, result_event_id, error,"
    " completed_at"
)


class MemoryProjector:
    name = "memory"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.limits = Limits.of(settings)

    def topics(self, settings: Settings) -> list[str]:
        return [settings.kafka.memory_topic(settings.generation)]

    async def apply(self, conn: psycopg.AsyncConnection, records: Sequence[ConsumerRecord]) -> list[DeadLetter]:
        """In log order; the statements go out in one pipeline (no round trip per event)."""
        letters = []
        # One event (the live path, mostly) goes as a plain statement: a pipeline's sync
        # would be a second round trip.
        async with conn.pipeline() if len(records) > 1 else contextlib.nullcontext():
            for record in records:
                try:
                    event = decode_record(record, self.limits)
                except InvalidEvent as exc:
                    if exc.reason == "erased":
                        continue  # sealed text whose key is destroyed: skipped, not dead-lettered
                    letters.append(DeadLetter(record, exc.reason, exc.detail))
                    continue
                if event.type in (SUMMARY_REQUESTED, SUMMARY_COMPLETED, SUMMARY_FAILED):
                    await conn.execute(*_statement(event))
        return letters


async def load_settled(conn: psycopg.AsyncConnection, settled: Sequence[tuple[Event, Event]]) -> None:
    """Rows for requests that were each answered once (a batch replay), in one COPY: the rows
    `apply` leaves after the request and then its completion or failure. Existing rows are
    left alone. As in `apply`, a second completion of one window (same prompt) stays
    'processing'."""
    now = datetime.now(UTC)
    completed_windows: set[tuple] = set()
    rows = []
    for request, result in settled:
        e, r, p = request.envelope, request.payload, result.payload
        asked = (e.tenant_id, e.conversation_id, r.memory_id, r.start_seq, r.end_seq, r.base_memory_id, r.attempt)
        window = (e.tenant_id, e.conversation_id, r.start_seq, r.end_seq, p.prompt_version)
        if result.type == SUMMARY_COMPLETED and window not in completed_windows:
            completed_windows.add(window)
            rows.append((*asked, p.prompt_version, p.model, e.event_id, "completed", p.text, p.generation_time_ms,
                         p.source_event_ids, result.envelope.event_id, None, now))
        elif result.type == SUMMARY_FAILED:
            rows.append((*asked, r.prompt_version, r.model, e.event_id, "failed", None, None, [],
                         result.envelope.event_id, p.error, None))
        else:
            rows.append((*asked, r.prompt_version, r.model, e.event_id, "processing", None, None, [], None, None, None))
    async with conn.cursor() as cur:
        await copy_insert(cur, "memory", _SETTLED_COLUMNS, rows)


def _statement(event) -> tuple[str, dict]:
    e, p = event.envelope, event.payload
    params = {
        "tenant": e.tenant_id, "conversation": e.conversation_id, "memory_id": p.memory_id,
        "event_id": e.event_id, "prompt_version": p.prompt_version, "model": p.model,
    }
    if event.type == SUMMARY_REQUESTED:
        return _REQUESTED, params | dict(start=p.start_seq, end=p.end_seq, base=p.base_memory_id, attempt=p.attempt)
    if event.type == SUMMARY_COMPLETED:
        return _COMPLETED, params | dict(text=p.text, ms=p.generation_time_ms, sources=p.source_event_ids)
    return _FAILED, params | dict(error=p.error, attempt=p.attempt)

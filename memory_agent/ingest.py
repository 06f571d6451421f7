"""Bulk ingest of a JSON Lines file: full envelopes or plain message objects.

Every line is validated before anything is sent; a bad line is reported with its number and
skipped, the run goes on. Plain lines without an `event_id` get a deterministic one (from
tenant, conversation, seq, role and content), so running the same file again sends nothing
new: lines whose message is already in the read model (same seq, same event id) are counted
as duplicates and not sent; a line whose seq already holds a different message is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import orjson
import psycopg
from tqdm import tqdm

from runtime.client import MemoryClient
from core.settings import Settings
from schemas.codec import encode_checked, validate
from schemas.envelope import Envelope, InvalidEvent
from schemas.limits import DEFAULT_LIMITS, Limits
from schemas.registry import MESSAGE_APPENDED, REGISTRY

log = logging.getLogger(__name__)

# Fields of a plain message line; `tenant_id` may come from --tenant instead.
MESSAGE_FIELDS = ("tenant_id", "conversation_id", "user_id", "seq", "role", "content")
OPTIONAL_FIELDS = ("subject_id", "metadata", "event_id", "occurred_at")
_NAMESPACE = uuid.UUID("5b0e7c1e-3d55-4b83-9a52-8d7f0f0b7a11")  # fixed: ids must be stable across runs

@dataclass
class IngestReport:
    lines: int = 0  # non-blank lines
    appended: int = 0  # sent and acknowledged by the broker
    duplicates: int = 0  # already in the read model (or earlier in the file): not sent
    refused: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    checked_duplicates: bool = True  # False: the read model could not be asked


def derived_event_id(tenant: str, conversation: str, seq: object, role: object, content: object) -> str:
    """The same message always gets the same id; an edited line gets another (and is refused
    as a conflict instead of silently ignored)."""
    digest = hashlib.sha256(orjson.dumps([role, content])).hexdigest()[:16]
    return str(uuid.uuid5(_NAMESPACE, f"{tenant}/{conversation}/{seq}/{digest}"))


def parse_line(line: bytes, default_tenant: str | None, limits: Limits = DEFAULT_LIMITS) -> Envelope:
    """A line with a `type` is a full envelope; otherwise a plain message. Checked against every
    rule a consumer applies (schemas/limits.py), so nothing is sent that would be dead-lettered.
    Raises InvalidEvent."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent("not_json", str(exc)) from None
    if not isinstance(data, dict):
        raise InvalidEvent("not_an_object", "each line must be a JSON object")
    if "type" in data:
        return _checked(validate(data, limits=limits).envelope, limits)
    unknown = sorted(set(data) - set(MESSAGE_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise InvalidEvent("invalid_field", f"unknown field(s) {', '.join(unknown)}")
    tenant = data.get("tenant_id", default_tenant)
    missing = [f for f in MESSAGE_FIELDS if f != "tenant_id" and f not in data]
    if tenant is None:
        missing.insert(0, "tenant_id (or pass --tenant)")
    if missing:
        raise InvalidEvent("invalid_field", f"missing {', '.join(missing)}")
    event_id = data.get("event_id") or derived_event_id(
        tenant, data["conversation_id"], data["seq"], data["role"], data["content"]
    )
    raw = {
        "type": MESSAGE_APPENDED,
        "schema_version": REGISTRY[MESSAGE_APPENDED].version,
        "event_id": event_id,
        "tenant_id": tenant,
        "conversation_id": data["conversation_id"],
        "user_id": data["user_id"],
        "subject_id": data.get("subject_id"),
        "seq": data["seq"],
        # ISO 8601 strings; a time without a zone is UTC, as at every other door (schemas/limits.py).
        "occurred_at": data.get("occurred_at") or datetime.now(UTC).isoformat(),
        "payload": {"role": data["role"], "content": data["content"], "metadata": data.get("metadata") or {}},
    }
    envelope = _checked(validate(raw, limits=limits).envelope, limits)
    return envelope


def _checked(envelope: Envelope, limits: Limits) -> Envelope:
    encode_checked(envelope, limits)  # sizes of the whole record and of its dead letter
    return envelope


def stored_event_ids(settings: Settings, envelopes: list[Envelope]) -> dict[tuple[str, str, int], str]:
    """(tenant, conversation, seq) -> event id of the messages of these lines already projected."""
    keys = {(e.tenant_id, e.conversation_id, e.seq) for e in envelopes if e.type == MESSAGE_APPENDED}
    if not keys:
        return {}
    tenants, conversations, seqs = (list(column) for column in zip(*keys))
    with psycopg.connect(settings.postgres.dsn, connect_timeout=5) as conn:
        rows = conn.execute(
            f'SELECT tenant_id, conversation_id, seq, event_id FROM "{settings.pg_schema}".messages'
            " WHERE (tenant_id, conversation_id, seq) IN"
            " (SELECT * FROM unnest(%s::text[], %s::text[], %s::int[]))",
            [tenants, conversations, seqs],
        ).fetchall()
    return {(t, c, s): event_id for t, c, s, event_id in rows}


def plan(
    settings: Settings, lines: list[bytes], default_tenant: str | None
) -> tuple[IngestReport, list[tuple[int, Envelope]]]:
    """Validate every line and sort out duplicates and conflicts: (report so far, what to send)."""
    report = IngestReport()
    parsed: list[tuple[int, Envelope]] = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        report.lines += 1
        try:
            parsed.append((line_no, parse_line(line, default_tenant, Limits.of(settings))))
        except InvalidEvent as exc:
            report.refused.append((line_no, str(exc)))
    try:
        stored = stored_event_ids(settings, [e for _, e in parsed])
    except psycopg.Error as exc:
        log.warning("could not check %s for messages already stored (%s); sending every valid line",
                    settings.pg_schema, str(exc).strip().splitlines()[0])
        report.checked_duplicates, stored = False, {}
    to_send, seen = [], dict(stored)
    for line_no, envelope in parsed:
        key = (envelope.tenant_id, envelope.conversation_id, envelope.seq)
        earlier = seen.get(key) if envelope.type == MESSAGE_APPENDED else None
        if earlier is None:
            if envelope.type == MESSAGE_APPENDED:
                seen[key] = envelope.event_id
            to_send.append((line_no, envelope))
        elif earlier == envelope.event_id:
            report.duplicates += 1
        else:
            report.refused.append((line_no, (
                f"seq_conflict: seq {envelope.seq} of {envelope.tenant_id}/{envelope.conversation_id} already"
                f" holds another message (event {earlier}); this line's is {envelope.event_id}")))
    report.refused.sort()
    return report, to_send


async def ingest_file(settings: Settings, path: Path, *, default_tenant: str | None = None, window: int = 500) -> IngestReport:
    """Validate every line, send the new valid ones in file order, wait for all acks."""
    lines = path.read_bytes().splitlines()
    report, to_send = await asyncio.to_thread(plan, settings, lines, default_tenant)
    if not to_send:
        return report
    async with MemoryClient(settings) as client:
        pending: list[asyncio.Future] = []
        with tqdm(total=len(to_send), unit="msg", desc=f"ingest {path.name}") as bar:
            for _, envelope in to_send:
                pending.append(await client.enqueue(envelope))
                if len(pending) >= window:
                    await asyncio.gather(*pending)
                    report.appended += len(pending)
                    bar.update(len(pending))
                    pending.clear()
            await asyncio.gather(*pending)
            report.appended += len(pending)
            bar.update(len(pending))
    return report

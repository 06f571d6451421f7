"""Bulk ingest of a JSON Lines file: full envelopes or plain message objects."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from tqdm import tqdm

from memory_agent.client import MemoryClient
from memory_agent.settings import Settings
from schemas.envelope import Envelope, InvalidEvent

_MESSAGE_FIELDS = ("user_id", "seq", "role", "content", "subject_id", "metadata", "event_id", "occurred_at")


@dataclass
class IngestReport:
    lines: int = 0
    appended: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)


def parse_line(client: MemoryClient, line: bytes, default_tenant: str | None) -> Envelope:
    """A line with a `type` is a full envelope; otherwise a message with conversation_id etc."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent("not_json", str(exc)) from None
    if not isinstance(data, dict):
        raise InvalidEvent("not_an_object", "each line must be a JSON object")
    if "type" in data:
        return client.validate_event(data)
    tenant = data.get("tenant_id", default_tenant)
    if tenant is None:
        raise InvalidEvent("invalid_field", "tenant_id: missing (or pass --tenant)")
    fields = {k: data[k] for k in _MESSAGE_FIELDS if k in data}
    return client.message_event(tenant_id=tenant, conversation_id=data.get("conversation_id"), **fields)


async def ingest_file(settings: Settings, path: Path, *, default_tenant: str | None = None, window: int = 500) -> IngestReport:
    """Validate every line, send the valid ones, wait for all acks; bad lines are reported, not sent."""
    report = IngestReport()
    lines = path.read_bytes().splitlines()
    async with MemoryClient(settings) as client:
        pending: list[asyncio.Future] = []
        with tqdm(total=len(lines), unit="msg", desc=f"ingest {path.name}") as bar:
            for line_no, line in enumerate(lines, start=1):
                if not line.strip():
                    bar.update(1)
                    continue
                report.lines += 1
                try:
                    envelope = parse_line(client, line, default_tenant)
                except InvalidEvent as exc:
                    report.refused.append((line_no, str(exc)))
                    bar.update(1)
                    continue
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

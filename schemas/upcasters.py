"""Step-by-step upcasters from older schema versions, applied to raw dicts before validation."""

from __future__ import annotations

from typing import Any

Raw = dict[str, Any]


def message_appended_v1_to_v2(event: Raw) -> Raw:
    """v1 called the text `text` and the timestamp `sent_at`, and had no metadata."""
    payload = dict(event.get("payload") or {})
    if "text" in payload:
        payload["content"] = payload.pop("text")
    payload.setdefault("metadata", {})
    upcast = {k: v for k, v in event.items() if k != "sent_at"}
    if "sent_at" in event and "occurred_at" not in event:
        upcast["occurred_at"] = event["sent_at"]
    upcast["payload"] = payload
    upcast["schema_version"] = 2
    return upcast

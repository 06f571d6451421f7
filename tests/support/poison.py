"""Every poison input of issue 11, as message fields (HTTP and SDK) and as raw records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import uuid
from datetime import UTC, datetime

import orjson

from schemas.envelope import conversation_key
from schemas.registry import MESSAGE_APPENDED


@dataclass(frozen=True)
class Poison:
    name: str
    changes: dict[str, Any]  # over a good message's fields
    http_status: int
    http_reason: str
    sdk_reason: str
    raw_reason: str


GOOD = {"user_id": "u1", "role": "user", "content": "a good message"}

CASES: list[Poison] = [
    Poison("seq_2_31", {"seq": 2**31}, 422, "out_of_range", "out_of_range", "out_of_range"),
    Poison("nul_content", {"content": "a\u0000b"}, 422, "invalid_text", "invalid_text", "invalid_text"),
    Poison("nul_user_id", {"user_id": "u\u00001"}, 422, "invalid_field", "invalid_field", "invalid_field"),
    Poison("nul_event_id", {"event_id": "e\u0000"}, 422, "invalid_field", "invalid_field", "invalid_field"),
    Poison("nul_metadata_key", {"metadata": {"k\u0000": 1}}, 422, "invalid_text", "invalid_text", "invalid_text"),
    Poison("nul_metadata_value", {"metadata": {"k": ["ok", {"v": "x\u0000"}]}}, 422, "invalid_text",
           "invalid_text", "invalid_text"),
    Poison("metadata_100kb", {"metadata": {"blob": "m" * 100_000}}, 413, "metadata_too_large", "metadata_too_large",
           "metadata_too_large"),
    # The body is larger than an event may be: the HTTP door refuses it before parsing.
    Poison("metadata_600kb", {"metadata": {"blob": "m" * 600_000}}, 413, "oversized", "metadata_too_large",
           "oversized"),
    Poison("just_under_1mib", {"metadata": {"blob": '"' * 520_000}}, 413, "oversized", "metadata_too_large",
           "oversized"),
]

def message_value(tenant: str, conversation: str, seq: int, changes: dict[str, Any] | None = None) -> bytes:
    """A message.appended event encoded as a producer would, bypassing every check."""
    fields = {**GOOD, "seq": seq, **(changes or {})}
    return orjson.dumps({
        "type": MESSAGE_APPENDED, "schema_version": 2, "event_id": fields.get("event_id", str(uuid.uuid4())),
        "tenant_id": tenant, "conversation_id": conversation, "user_id": fields["user_id"], "subject_id": None,
        "seq": fields["seq"], "occurred_at": datetime.now(UTC).isoformat(),
        "payload": {"role": fields["role"], "content": fields["content"], "metadata": fields.get("metadata", {})},
    })


def raw_records(tenant: str, conversation: str, seq: int) -> list[tuple[str, str, bytes | None, bytes]]:
    """(name, expected reason, key, value) of every poison input as a record of `conversation`."""
    own = conversation_key(tenant, conversation)
    out = []
    for case in CASES:
        value = message_value(tenant, conversation, seq, case.changes)
        if case.name == "just_under_1mib":
            assert 1_000_000 < len(value) < 1_048_000, len(value)
        out.append((case.name, case.raw_reason, own, value))
    # Tenant A's key, tenant C's payload: must never reach tenant C's (or A's) state.
    out.append(("key_mismatch", "key_mismatch", own, message_value("tenant-c", "conv-c", seq)))
    out.append(("null_key", "key_missing", None, message_value(tenant, conversation, seq)))
    out.append(("undecodable", "bad_utf8", own, b'{"type": "message.appended", "\xff\xfe": 1}'))
    return out

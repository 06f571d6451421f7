"""Sealed (encrypted) free text in events: the markers, which fields are sealed, the hooks.

Messages: a producer with `privacy.encrypt_content` on (core/privacy.py) replaces a
`message.appended` payload's content and metadata by `content` = the AES-GCM ciphertext
(base64) of {"content", "metadata"} and `metadata` = {SEALED: "v1:<key_id>"}. The opener opens
it, or returns the ERASED payload when the author's key was destroyed (a tombstone message: the
folds keep their seqs).

Every other event with free text (derived events on the memory topic, fact management,
hand-stored memories, `context.served`): `encode` calls the process's sealer, which moves the
fields of SEALED_FIELDS[type] out of the payload into `payload[SEALED]` =
{"v": 1, "keys": [[user, key_id], ...], "ct": base64} (one ciphertext under a key derived from
every listed user's key: losing any one of them makes it unreadable). `validate` calls the
field opener, which puts them back, or raises `InvalidEvent("erased")`: consumers skip such an
event (no dead letter). Ids, seqs, times and types stay clear; vectors are sealed with their texts."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from schemas import facts_events as fe
from schemas import lineage_events as le
from schemas import topic_events as te

SEALED = "_sealed"
ERASED_CONTENT = "[erased]"

# The free text of each event type: "a.b" a nested field, "a[].b" that field of every item of list a.
# The embeddings of those texts are sealed with them (a vector can leak its text to whoever has
# the model: inversion attacks), so a destroyed key leaves no readable vector on the log either.
SEALED_FIELDS: dict[str, tuple[str, ...]] = {
    "summary.completed": ("text",),
    "summary.failed": ("error",),
    fe.CHUNK_RECORDED: ("summary", "facts[].content", "facts[].tags", "gate.reason", "remapped_categories",
                        "embedding", "facts[].embedding"),
    fe.CHUNK_FAILED: ("error",),
    fe.CHUNK_SKIPPED: ("error",),
    fe.FACT_EDITED: ("content_snapshot", "new_content", "snapshot_embedding", "new_embedding"),
    fe.FACT_VISIBILITY_CHANGED: ("content_snapshot", "snapshot_embedding"),
    fe.FACT_DELETED: ("content_snapshot", "snapshot_embedding"),
    fe.MEMORY_STORED: ("content", "tags", "embedding"),
    te.TOPIC_EMBEDDING_REQUESTED: ("content",),
    te.TOPIC_MESSAGE_EMBEDDED: ("embedding",),
    te.TOPIC_EMBEDDING_FAILED: ("error",),
    te.TOPIC_CREATED: ("title",),
    te.TOPIC_MESSAGE_ASSIGNED: ("content", "topic.title"),
    te.TOPIC_MESSAGE_UNASSIGNED: ("reason",),
    te.TOPIC_COMPACTION_REQUESTED: ("previous_summary", "title"),
    te.TOPIC_COMPACTED: ("summary",),
    te.TOPIC_COMPACTION_FAILED: ("error",),
    te.TOPIC_MESSAGE_RECALLED: ("content", "error", "embedding"),
    le.CONTEXT_SERVED: ("query", "retrieval_error"),
}

Opener = Callable[[Any, Any], Any]  # (envelope, MessageAppended) -> MessageAppended
Sealer = Callable[[Any, dict], Any]  # (envelope, plaintext fields) -> envelope with payload[SEALED]
FieldOpener = Callable[[Any], dict]  # envelope -> plaintext fields; raises InvalidEvent("erased")
StateSealer = Callable[[str, str, bytes], "bytes | None"]  # (tenant, conversation, bytes) -> sealed, None: plain
StateOpener = Callable[[str, str, bytes], "bytes | None"]  # -> the bytes, None: erased
_STATE_PREFIX = b'{"' + SEALED.encode() + b'":'
_opener: list[Opener] = []
_state: list = [None, None]  # [sealer, opener]
_sealer: list[Sealer] = []
_field_opener: list[FieldOpener] = []


def set_opener(opener: Opener | None) -> None:
    _opener[:] = [opener] if opener is not None else []


def set_sealer(sealer: Sealer | None) -> None:
    """Install (or remove, None) the process's sealer of free-text fields (`encode` calls it)."""
    _sealer[:] = [sealer] if sealer is not None else []


def set_field_opener(opener: FieldOpener | None) -> None:
    _field_opener[:] = [opener] if opener is not None else []


def set_state_hooks(sealer: StateSealer | None, opener: StateOpener | None) -> None:
    _state[:] = [sealer, opener]


def seal_state(key: bytes, raw: bytes) -> bytes:
    """A fold's state for its changelog (key: tenant/conversation), sealed when this process seals."""
    from schemas.envelope import parse_conversation_key  # noqa: PLC0415

    parsed = parse_conversation_key(key) if _state[0] is not None else None
    sealed = _state[0](*parsed, raw) if parsed else None
    return raw if sealed is None else sealed


def open_state(key: bytes, raw: bytes | None) -> bytes | None:
    """The state's bytes; None (start afresh) when it is sealed and cannot be opened."""
    if not raw or not raw.startswith(_STATE_PREFIX):
        return raw
    from schemas.envelope import parse_conversation_key  # noqa: PLC0415

    parsed = parse_conversation_key(key)
    return _state[1](*parsed, raw) if parsed and _state[1] is not None else None


def is_sealed(payload: Any) -> bool:
    return isinstance(getattr(payload, "metadata", None), dict) and SEALED in payload.metadata


def open_payload(envelope: Any, payload: Any) -> Any:
    """The plaintext payload of a sealed message (the payload itself without an opener)."""
    return _opener[0](envelope, payload) if _opener and is_sealed(payload) else payload


def pluck(payload: dict, paths: tuple[str, ...]) -> tuple[dict, dict]:
    """(payload without the fields at `paths`, {path: value}); a deep copy, the input is kept."""
    out, taken = copy.deepcopy(payload), {}
    for path in paths:
        head, _, field = path.partition("[].")
        if field:
            items = out.get(head)
            if isinstance(items, list) and items:
                taken[path] = [item.pop(field, None) if isinstance(item, dict) else None for item in items]
            continue
        *parents, leaf = path.split(".")
        node = out
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            taken[path] = node.pop(leaf)
    return out, taken


def restore(payload: dict, taken: dict) -> dict:
    """`pluck` undone: the fields put back where they were (a new dict)."""
    out = copy.deepcopy(payload)
    for path, value in taken.items():
        head, _, field = path.partition("[].")
        if field:
            for item, one in zip(out.get(head) or [], value or [], strict=False):
                if one is not None and isinstance(item, dict):
                    item[field] = one
            continue
        *parents, leaf = path.split(".")
        node = out
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return out


def seal_fields(envelope: Any) -> Any:
    """The envelope `encode` writes: its free text sealed when a sealer is installed."""
    paths = SEALED_FIELDS.get(envelope.type)
    if not _sealer or paths is None or SEALED in envelope.payload:
        return envelope
    stripped, taken = pluck(envelope.payload, paths)
    return _sealer[0](envelope.model_copy(update={"payload": stripped}), taken) if taken else envelope


def open_fields(envelope: Any) -> dict:
    """The plaintext payload dict of an event whose free text is sealed; raises
    InvalidEvent("erased") when it cannot be opened (a destroyed key: consumers skip it)."""
    from schemas.envelope import InvalidEvent  # noqa: PLC0415 - envelope imports nothing from here

    if not _field_opener:
        raise InvalidEvent("invalid_field", f"{envelope.type}: sealed free text and no key store in this process")
    taken = _field_opener[0](envelope)
    return restore({k: v for k, v in envelope.payload.items() if k != SEALED}, taken)

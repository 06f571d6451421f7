"""Pure rules of lineage (docs/lineage.md): item versions, memory ids, and how a reconstructed
turn context is compared with the one recorded when it was served."""

from __future__ import annotations

import hashlib
from typing import Any

from core.settings import Settings

KINDS = ("summary", "chunk", "fact", "topic", "message")


def served_topic(settings: Settings) -> str:
    """context.served events: one topic per deployment (not per generation), kept forever,
    so every generation (and a replay) projects the same record of what was served."""
    return settings.kafka.topic("context-served")


def version_of(content: str | None) -> str:
    """The version of an item's content: a short digest, the same in every replay."""
    return hashlib.sha256((content or "").encode("utf-8", "surrogatepass")).hexdigest()[:16]


def split_id(kind: str, item_id: str) -> tuple[str, str | None]:
    """(conversation_id, local id) of a conversation-scoped memory id: `summary` and `message`
    ids are `CONVERSATION:LOCAL` (a memory id, a seq), split at the last colon; `chunk`, `fact`
    and `topic` ids are as stored (unique in a tenant; local id None). Raises ValueError when
    malformed."""
    if kind in ("chunk", "fact", "topic"):
        return item_id, None
    conversation, sep, local = item_id.rpartition(":")
    if not sep or not conversation or not local:
        raise ValueError(f"a {kind} id is CONVERSATION:{'SEQ' if kind == 'message' else 'MEMORY_ID'}, got {item_id!r}")
    if not local.isdigit():
        raise ValueError(f"a {kind} id ends with a number, got {item_id!r}")
    return conversation, local


def _items(served: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(i["kind"], i["id"]): i["version"] for i in served.get("retrieved") or []}


def differences(recorded: dict[str, Any], rebuilt: dict[str, Any]) -> list[str]:
    """What differs between a recorded context.served payload and a reconstructed one (same
    shape), as readable lines; empty when they match. Retrieved items are compared only when
    the reconstruction has them (None: retrieval is not recomputed, docs/lineage.md)."""
    found: list[str] = []
    was, now = recorded.get("summary"), rebuilt.get("summary")
    if (was or {}).get("memory_id") != (now or {}).get("memory_id"):
        found.append(f"summary: recorded {_summary(was)}, reconstructed {_summary(now)}")
    if list(recorded.get("gap_seqs") or []) != list(rebuilt.get("gap_seqs") or []):
        found.append(f"gap: recorded seqs {_seqs(recorded.get('gap_seqs'))},"
                     f" reconstructed {_seqs(rebuilt.get('gap_seqs'))}")
    if rebuilt.get("retrieved") is not None:
        old, new = _items(recorded), _items(rebuilt)
        for key in sorted(old.keys() | new.keys()):
            if key not in new:
                found.append(f"retrieved {key[0]} {key[1]}: recorded, did not exist then")
            elif key not in old:
                found.append(f"retrieved {key[0]} {key[1]}: reconstructed, not recorded")
            elif old[key] != new[key]:
                found.append(f"retrieved {key[0]} {key[1]}: recorded version {old[key]}, then {new[key]}")
    was, now = recorded.get("active_topic"), rebuilt.get("active_topic")
    if (was or {}).get("topic_id") != (now or {}).get("topic_id"):
        found.append(f"active topic: recorded {(was or {}).get('topic_id')}, reconstructed {(now or {}).get('topic_id')}")
    elif was and now:
        for field in ("summary_upto_seq", "message_seqs"):
            if was.get(field) != now.get(field):
                found.append(f"active topic {field}: recorded {was.get(field)}, reconstructed {now.get(field)}")
    return found


def _summary(summary: dict[str, Any] | None) -> str:
    if not summary:
        return "none"
    return f"#{summary['memory_id']} (seqs {summary['start_seq']}..{summary['end_seq']})"


def _seqs(seqs: list[int] | None) -> str:
    seqs = list(seqs or [])
    if not seqs:
        return "none"
    if seqs == list(range(seqs[0], seqs[-1] + 1)):
        return f"{seqs[0]}..{seqs[-1]}"
    return ",".join(map(str, seqs))

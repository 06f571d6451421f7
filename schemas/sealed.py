"""Sealed (encrypted) message content: the marker in the event and the decode hook.

A producer with `privacy.encrypt_content` on (memory_agent/privacy.py) replaces a
`message.appended` payload's content and metadata by `content` = the AES-GCM ciphertext
(base64) of {"content", "metadata"} and `metadata` = {SEALED: "v1:<key_id>"}. Every consumer
decodes through schemas.codec, which calls the process's opener (installed by the worker, the
projectors and the API) on such payloads: it returns the plaintext payload, or the ERASED one
when the author's key was destroyed. Without an opener the sealed payload passes as it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SEALED = "_sealed"
ERASED_CONTENT = "[erased]"

Opener = Callable[[Any, Any], Any]  # (envelope, MessageAppended) -> MessageAppended
_opener: list[Opener] = []


def set_opener(opener: Opener | None) -> None:
    _opener[:] = [opener] if opener is not None else []


def is_sealed(payload: Any) -> bool:
    return isinstance(getattr(payload, "metadata", None), dict) and SEALED in payload.metadata


def open_payload(envelope: Any, payload: Any) -> Any:
    """The plaintext payload of a sealed message (the payload itself without an opener)."""
    return _opener[0](envelope, payload) if _opener and is_sealed(payload) else payload

"""The chunk fold's state as stored in its faust table (changelog topic and state folder).

The state is seqs, counts and times, plus one free text: `last_error`, the message of the last
failed chunk request (an LLM or embedding error, which may quote the model's output and so the
conversation's words). With sealing on (docs/lineage.md, crypto-shredding) that text is sealed
with the conversation's participants' keys (schemas.sealed.seal_state, the hook the topic fold
uses for its whole state) and stored as {"_sealed": ...}; everything else stays clear, so a
destroyed key never costs the fold its position: the error then reads "[erased]". Without a
sealer (sealing off, or a conversation nobody sealed a message in) the state is stored as it
always was, and states written before this codec (or by the batch replay) load unchanged."""

from __future__ import annotations

import orjson

from schemas.sealed import ERASED_CONTENT, SEALED, open_state, seal_state
from domain.facts.chunking import ChunkState


def dumps(key: bytes, state: ChunkState) -> bytes:
    data = state.to_dict()
    if data.get("last_error"):
        text = data["last_error"].encode()
        sealed = seal_state(key, text)
        if sealed is not text:
            data["last_error"] = orjson.loads(sealed)
    return orjson.dumps(data)


def loads(key: bytes, raw: bytes | None) -> ChunkState:
    """The state of `key` (empty: a new conversation); a sealed error that no longer opens
    reads ERASED_CONTENT."""
    if not raw:
        return ChunkState()
    data = orjson.loads(raw)
    error = data.get("last_error")
    if isinstance(error, dict) and SEALED in error:
        opened = open_state(key, orjson.dumps(error))
        data["last_error"] = opened.decode() if opened is not None else ERASED_CONTENT
    return ChunkState.from_dict(data)

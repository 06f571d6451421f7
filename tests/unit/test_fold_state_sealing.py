"""What the window and chunk folds keep in their changelogs (docs/security.md, "Fold state"):
the window state holds no text at all; the chunk state's one free text, the last failure
message, is sealed with the conversation's participants' keys when sealing is on."""

from __future__ import annotations

import dataclasses
import typing

import orjson

from core import sealing
from schemas import sealed
from schemas.sealed import ERASED_CONTENT
from streams.facts import state_codec
from domain.facts.chunking import ChunkInFlight, ChunkState
from domain.window.fold import InFlight, WindowState
from tests.unit.test_privacy import Known, MemoryKeys

KEY = b"t/c"
STATE = ChunkState(last_seq=9, last_summarized_end=4, failed_attempts=2, not_before=5.0,
                   last_error="model answered: the user's code word is zqxfold", failures=2)


def text_fields(cls) -> set[str]:
    hints = typing.get_type_hints(cls)
    return {f.name for f in dataclasses.fields(cls)
            if hints[f.name] is str or str in typing.get_args(hints[f.name])
            or any(str in typing.get_args(a) for a in typing.get_args(hints[f.name]))}


def test_the_window_state_holds_no_text_and_the_chunk_state_only_its_last_error():
    # A new text field here must be sealed like last_error (streams/facts/state_codec.py).
    assert text_fields(WindowState) == {"last_rederive"}  # an erasure's event id, not content
    assert text_fields(InFlight) == set()
    assert text_fields(ChunkState) == {"last_error"} and text_fields(ChunkInFlight) == set()


def test_without_sealing_the_chunk_state_is_stored_as_it_always_was():
    raw = state_codec.dumps(KEY, STATE)
    assert raw == orjson.dumps(STATE.to_dict())
    assert state_codec.loads(KEY, raw) == STATE and state_codec.loads(KEY, None) == ChunkState()


def test_with_sealing_the_error_text_is_sealed_and_the_position_survives_an_erasure():
    keys = MemoryKeys()
    sealed.set_state_hooks(sealing.state_sealer(keys, Known(c={"alice", "bob"})), sealing.state_opener(keys))
    try:
        raw = state_codec.dumps(KEY, STATE)
        assert b"zqxfold" not in raw and b"model answered" not in raw
        assert orjson.loads(raw)["last_summarized_end"] == 4  # the rest stays clear
        assert state_codec.loads(KEY, raw) == STATE
        assert state_codec.dumps(KEY, ChunkState(last_seq=3)) == orjson.dumps(ChunkState(last_seq=3).to_dict())
        keys.destroy("t", "bob")
        erased = state_codec.loads(KEY, raw)
        assert erased.last_error == ERASED_CONTENT
        assert dataclasses.replace(erased, last_error=STATE.last_error) == STATE  # seqs and counts kept
        # No participants (nobody sealed a message there): plain, as before.
        assert b"zqxfold" in state_codec.dumps(b"t/plain", STATE)
    finally:
        sealed.set_state_hooks(None, None)

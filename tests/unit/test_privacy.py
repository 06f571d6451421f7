"""Crypto-shredding without a database: sealing, opening, a destroyed key, the off switch;
derived free text sealed with every contributor's key."""

import orjson
import pytest

from core import sealing
from core.privacy import opener, seal
from schemas import sealed
from schemas.codec import decode, encode, new_event
from schemas import facts_events as fe
from schemas.envelope import InvalidEvent
from schemas.events import MessageAppended, SummaryCompleted
from schemas.registry import MESSAGE_APPENDED, SUMMARY_COMPLETED


class MemoryKeys:
    def __init__(self) -> None:
        self.keys: dict[tuple[str, str], tuple[str, bytes | None]] = {}

    def get_or_create(self, tenant, user):
        import os
        key_id, key = self.keys.get((tenant, user), (None, None))
        if key is None:
            key_id, key = os.urandom(4).hex(), os.urandom(32)
            self.keys[(tenant, user)] = (key_id, key)
        return key_id, key

    def live(self, tenant, user):
        key_id, key = self.keys.get((tenant, user), (None, None))
        if key_id is not None and key is None:
            return None  # destroyed: never revived for derived text
        return self.get_or_create(tenant, user)

    def get(self, tenant, user, key_id):
        found = self.keys.get((tenant, user))
        return found[1] if found and found[0] == key_id else None

    def destroy(self, tenant, user):
        key_id, _ = self.keys[(tenant, user)]
        self.keys[(tenant, user)] = (key_id, None)
        return True


def message(text: str, user: str = "alice"):
    return new_event(MESSAGE_APPENDED, MessageAppended(role="user", content=text, metadata={"lang": "en"}),
                     tenant_id="t", conversation_id="c", user_id=user, seq=0)


def test_a_sealed_message_opens_for_every_decoder_and_reads_erased_once_the_key_is_destroyed():
    keys = MemoryKeys()
    envelope = message("my code word is zqx123")
    raw = encode(seal(envelope, keys))
    assert b"zqx123" not in raw and b"lang" not in raw
    sealed.set_opener(opener(keys))
    try:
        event = decode(raw, key=envelope.key)
        assert (event.payload.content, event.payload.metadata) == ("my code word is zqx123", {"lang": "en"})
        keys.destroy("t", "alice")
        erased = decode(raw, key=envelope.key)  # no exception: the event decodes as erased
        assert erased.payload.content == sealed.ERASED_CONTENT and erased.payload.metadata == {"erased": True}
        assert erased.envelope.seq == 0 and erased.envelope.event_id == envelope.event_id
        # Ciphertext moved to another event (associated data: the event id) does not open.
        other = message("x", user="bob")
        moved = seal(other, keys).model_copy(update={"event_id": "another"})
        assert decode(encode(moved)).payload.content == sealed.ERASED_CONTENT
    finally:
        sealed.set_opener(None)


def test_without_sealing_events_are_unchanged_and_without_an_opener_sealed_content_stays_sealed():
    envelope = message("plain words")
    assert decode(encode(envelope)).payload.content == "plain words"
    keys = MemoryKeys()
    raw = encode(seal(envelope, keys))
    assert decode(raw).payload.metadata.keys() == {sealed.SEALED}


class Known:
    """Participants without a database: who wrote in each conversation."""

    def __init__(self, **by_conversation):
        self.by = {c: set(users) for c, users in by_conversation.items()}

    def of(self, tenant, conversation):
        return self.by.get(conversation, set())


def summary(text: str, user: str = "alice"):
    payload = SummaryCompleted(memory_id=1, start_seq=0, end_seq=3, text=text, generation_time_ms=5,
                               prompt_version="p1", model="m", source_event_ids=["e1", "e2"])
    return new_event(SUMMARY_COMPLETED, payload, tenant_id="t", conversation_id="c", user_id=user, seq=3)


@pytest.fixture
def hooks():
    keys = MemoryKeys()
    sealed.set_sealer(sealing.sealer(keys, Known(c={"alice", "bob"})))
    sealed.set_field_opener(sealing.field_opener(keys))
    yield keys
    sealed.set_sealer(None)
    sealed.set_field_opener(None)


def test_a_summary_mixing_two_users_is_sealed_with_both_keys_and_unreadable_once_either_is_destroyed(hooks):
    keys = hooks
    envelope = summary("alice said zqx1 and bob said bkp2")
    raw = encode(envelope)
    assert b"zqx1" not in raw and b"bkp2" not in raw
    assert b'"memory_id":1' in raw and b'"source_event_ids":["e1","e2"]' in raw  # ids stay clear
    event = decode(raw, key=envelope.key)
    assert event.payload.text == "alice said zqx1 and bob said bkp2"
    assert [u for u, _ in orjson.loads(raw)["payload"][sealed.SEALED]["keys"]] == ["alice", "bob"]
    keys.destroy("t", "bob")  # either contributor's key: the text is gone
    with pytest.raises(InvalidEvent) as erased:
        decode(raw, key=envelope.key)
    assert erased.value.reason == "erased"
    # Sealed now, bob (erased) is left out: what is derived after his erasure opens with alice's key.
    later = decode(encode(summary("alice alone")), key=envelope.key)
    assert later.payload.text == "alice alone"


def test_nested_and_list_fields_are_sealed_and_restored_exactly(hooks):
    vector = fe.Vector(model="v", dimensions=2, values=[0.6, 0.8])
    fact = fe.RecordedFact(fact_id="f1", category="other", content="likes zqx3", tags=["zqx4"], embedding=vector)
    payload = fe.ChunkRecorded(
        chunk_id="k", start_seq=0, end_seq_exclusive=4, owner_user_id="carol", summary="chunk zqx5", embedding=vector,
        facts=[fact, fact.model_copy(update={"fact_id": "f2", "tags": []})],
        gate=fe.GateVerdict(worth_remembering=True, reason="zqx6", method="llm"), extractor="llm", model="m",
        prompt_version="p", observed_at="2026-01-01T00:00:00Z", generation_time_ms=1)
    envelope = new_event(fe.CHUNK_RECORDED, payload, tenant_id="t", conversation_id="c", user_id="alice", seq=3)
    raw = encode(envelope)
    assert b"zqx" not in raw and b'"fact_id":"f2"' in raw
    assert [u for u, _ in orjson.loads(raw)["payload"][sealed.SEALED]["keys"]] == ["alice", "bob", "carol"]  # + owner
    assert decode(raw, key=envelope.key).payload == payload


def test_an_event_whose_every_contributor_is_erased_is_unreadable_at_birth(hooks):
    keys = hooks
    for user in ("alice", "bob"):
        keys.get_or_create("t", user)
        keys.destroy("t", user)
    raw = encode(summary("in flight zqx7"))
    assert b"zqx7" not in raw
    with pytest.raises(InvalidEvent, match="erased"):
        decode(raw)


def test_without_a_sealer_derived_events_are_plain_and_without_an_opener_sealed_ones_are_refused(hooks):
    raw = encode(summary("sealed text"))
    sealed.set_sealer(None)
    assert b"plain text" in encode(summary("plain text"))
    sealed.set_field_opener(None)
    with pytest.raises(InvalidEvent) as refused:
        decode(raw)
    assert refused.value.reason == "invalid_field"  # a misconfigured process: dead-lettered, not skipped


def test_pluck_and_restore_are_inverse_and_leave_the_input_alone():
    payload = {"a": "x", "b": {"c": "y", "d": 1}, "l": [{"t": "1", "k": 2}, {"k": 3}], "n": None}
    out, taken = sealed.pluck(payload, ("a", "b.c", "l[].t", "n", "missing"))
    assert out == {"b": {"d": 1}, "l": [{"k": 2}, {"k": 3}]} and payload["a"] == "x"
    assert sealed.restore(out, taken) == payload


def test_a_fold_state_is_sealed_with_the_conversations_participants_and_starts_afresh_once_erased():
    keys = MemoryKeys()
    sealed.set_state_hooks(sealing.state_sealer(keys, Known(c={"alice", "bob"})), sealing.state_opener(keys))
    try:
        raw = b'{"format":1,"topics":{"title":"zqx8"}}'
        stored = sealed.seal_state(b"t/c", raw)
        assert b"zqx8" not in stored and sealed.open_state(b"t/c", stored) == raw
        assert sealed.open_state(b"t/other", stored) is None  # bound to its conversation
        assert sealed.seal_state(b"t/nobody-sealed-here", raw) == raw  # no participants: plain, as before
        assert sealed.open_state(b"t/nobody-sealed-here", raw) == raw
        keys.destroy("t", "alice")
        assert sealed.open_state(b"t/c", stored) is None  # erased: the fold starts this conversation afresh
    finally:
        sealed.set_state_hooks(None, None)

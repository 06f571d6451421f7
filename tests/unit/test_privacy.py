"""Crypto-shredding without a database: sealing, opening, a destroyed key, the off switch."""

from memory_agent.privacy import opener, seal
from schemas import sealed
from schemas.codec import decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED


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

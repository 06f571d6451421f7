"""The conversation processor's state record: every slice's state in one framed record."""

import pytest

from streams.processor import States
from streams.slice import BadRecord, Slice, pack, unpack


def test_a_record_holds_each_slice_s_bytes_and_reads_them_back():
    parts = {"window": b'{"pending_end":3}', "topics": b"\x00\xffsealed", "facts": b""}
    raw = pack(parts)
    assert unpack(raw) == parts
    assert pack(dict(reversed(parts.items()))) == raw  # equal maps, equal bytes
    assert unpack(None) == {} and unpack(b"") == {}


@pytest.mark.parametrize("raw", [b'{"pending_end":3}', pack({"window": b"abcdef"})[:-2], pack({"w": b"x"})[:6]])
def test_what_is_not_a_whole_record_is_refused(raw):
    with pytest.raises(BadRecord):
        unpack(raw)


def _slice(name: str, log: list) -> Slice:
    def load(key, raw):
        log.append((name, "load", raw))
        return int(raw) if raw else 0

    def dump(key, state):
        log.append((name, "dump", state))
        return str(state).encode()

    return Slice(name, frozenset({"message.appended"}), load, dump, lambda state, event, now: (state + 1, []))


def test_only_the_slices_an_event_changed_are_encoded_and_the_record_is_decoded_once():
    log: list = []
    table: dict = {b"t/c": pack({"a": b"4", "b": b"7"})}
    states = States(table)
    a, b = _slice("a", log), _slice("b", log)
    entry = states.entry(b"t/c")
    assert states.state(entry, b"t/c", a) == 4
    states.write(b"t/c", entry, {"a": a.dump(b"t/c", 5)}, {"a": 5})
    assert unpack(table[b"t/c"]) == {"a": b"5", "b": b"7"}  # b's bytes kept as they were
    assert [step for step in log if step[1] == "dump"] == [("a", "dump", 5)]
    again = states.entry(b"t/c")  # the table still holds the bytes just written: nothing decoded again
    assert states.state(again, b"t/c", a) == 5 and ("a", "load", b"5") not in log
    table[b"t/c"] = pack({"a": b"9"})  # a recovery stored other bytes: read afresh
    assert states.state(states.entry(b"t/c"), b"t/c", a) == 9


def test_the_cache_keeps_the_most_recent_conversations_only():
    table = {f"t/c{n}".encode(): pack({"a": str(n).encode()}) for n in range(5)}
    states = States(table, capacity=2)
    for key in table:
        states.entry(key)
    assert list(states._cache) == [b"t/c3", b"t/c4"]

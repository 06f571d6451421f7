"""The processor's batch: every record folded on the state its predecessors of the batch left, one
state write per conversation, right after its last record of the batch (streams/processor.py
`_process`, `_write`; docs/scaling.md stub11; first tried as stub9's c2e9873)."""

import asyncio
from types import SimpleNamespace

from streams.context import StreamContext
from streams.processor import States, _process
from streams.slice import Slice, pack, unpack

KEY_A, KEY_B = b"t/a", b"t/b"


class Table(dict):
    """The processor's table: records its writes in order (each is one changelog record in faust)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.writes: list[tuple[bytes, bytes]] = []

    def __setitem__(self, key, value) -> None:
        self.writes.append((key, value))
        super().__setitem__(key, value)


class Ctx:
    """What the processor uses of `StreamContext`: the memory topic's send (recorded, with the
    table's writes so far: events go out before the state), and the real `applying` (a record
    error dead-letters the record through `refuse`)."""

    applying = StreamContext.applying

    def __init__(self, table: Table) -> None:
        self.memory_events, self.table = self, table
        self.refused: list[tuple[int, str]] = []
        self.sent: list[tuple[bytes, bytes, int]] = []

    async def send(self, *, key, value, headers=None) -> None:
        self.sent.append((key, value, len(self.table.writes)))

    async def refuse(self, record, reason, detail, *, stage) -> None:
        self.refused.append((record.offset, stage))


class _Record:  # a faust event: weakly referenced as the task's current event
    def __init__(self, key: bytes, offset: int) -> None:
        self.key, self.message = key, SimpleNamespace(topic="conversation", partition=0, offset=offset)


def _counter(name: str, dumps: list, seen: list, refuse_above: int | None = None, emit: bool = False) -> Slice:
    """A slice counting its conversation's messages; it records the state each fold saw (and,
    with `emit`, sends one event a fold)."""

    def dump(key, state):
        dumps.append((name, key, state))
        if refuse_above is not None and state > refuse_above:
            raise ValueError("the codec refuses this state")
        return str(state).encode()

    def fold(state, event, now):
        seen.append((name, state))
        return state + 1, ([SimpleNamespace(n=state)] if emit else [])

    return Slice(name, frozenset({"message.appended"}), lambda key, raw: int(raw) if raw else 0, dump, fold)


def _run(ctx, table, slices, records, in_turn_below=None) -> bool:
    """The agent's loop over one batch: `in_turn_below` an offset from which a rebalance began."""
    states, pending = States(table), {}
    last = {record.key: index for index, record in enumerate(records)}
    event = SimpleNamespace(type="message.appended")

    async def main() -> bool:
        for index, record in enumerate(records):
            still = (lambda r=record: in_turn_below is None or r.message.offset < in_turn_below)
            if not await _process(ctx, record, states, slices, event, pending, last[record.key] == index, still):
                return False
        return True

    return asyncio.run(main())


def test_a_batch_writes_each_conversation_once_after_its_last_record_with_every_record_folded_in_order(monkeypatch):
    monkeypatch.setattr("streams.processor.encode", lambda envelope: str(envelope.n).encode())
    dumps, seen = [], []
    table = Table({KEY_A: pack({"n": b"10"})})
    ctx = Ctx(table)
    part = _counter("n", dumps, seen, emit=True)
    records = [_Record(KEY_A, 0), _Record(KEY_B, 1), _Record(KEY_A, 2), _Record(KEY_B, 3), _Record(KEY_A, 4)]
    assert _run(ctx, table, [part], records)
    assert seen == [("n", 10), ("n", 0), ("n", 11), ("n", 1), ("n", 12)]  # each fold on its predecessor's state
    # One write (changelog record) per conversation, not per record: B's after its last record (offset 3)
    assert [key for key, _ in table.writes] == [KEY_B, KEY_A]
    assert unpack(table[KEY_A]) == {"n": b"13"} and unpack(table[KEY_B]) == {"n": b"2"}
    assert sorted(dumps) == [("n", KEY_A, 13), ("n", KEY_B, 2)]  # each state encoded once a batch
    # Every event went out before its conversation's state was written
    assert [(key, value, writes) for key, value, writes in ctx.sent] == [
        (KEY_A, b"10", 0), (KEY_B, b"0", 0), (KEY_A, b"11", 0), (KEY_B, b"1", 0), (KEY_A, b"12", 1)]


def test_a_rebalance_leaves_the_cut_conversation_unwritten_and_the_ones_written_before_it_stay():
    seen: list = []
    table = Table({KEY_A: pack({"n": b"10"})})
    part = _counter("n", [], seen)
    records = [_Record(KEY_B, 0), _Record(KEY_A, 1), _Record(KEY_A, 2)]
    assert not _run(Ctx(table), table, [part], records, in_turn_below=2)  # offset 2: a rebalance began during its fold
    assert len(seen) == 3
    assert [key for key, _ in table.writes] == [KEY_B]  # B's last record came before the rebalance
    assert unpack(table[KEY_A]) == {"n": b"10"}  # A's records (1 and 2) are left to their redelivery


def test_a_slice_whose_codec_refuses_keeps_its_state_and_the_others_are_written():
    dumps: list = []
    table = Table({KEY_A: pack({"n": b"1", "m": b"5"})})
    refusing, fine = _counter("n", dumps, [], refuse_above=2), _counter("m", dumps, [])
    ctx = Ctx(table)
    assert _run(ctx, table, [refusing, fine], [_Record(KEY_A, 7), _Record(KEY_A, 8)])
    assert ctx.refused == [(8, "agent.process-conversation.n")]  # the conversation's last record, for that slice
    assert unpack(table[KEY_A]) == {"n": b"1", "m": b"7"}


def test_an_unchanged_state_is_not_written():
    table = Table({KEY_A: pack({"n": b"1"})})
    still = Slice("n", frozenset({"message.appended"}), lambda key, raw: int(raw), lambda key, s: str(s).encode(),
                  lambda state, event, now: (state, []))
    assert _run(Ctx(table), table, [still], [_Record(KEY_A, 0), _Record(KEY_A, 1)])
    assert table.writes == []

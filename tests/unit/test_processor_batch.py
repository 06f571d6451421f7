"""The processor's batch: every record folded on the state its predecessors left, one state write
per conversation once the batch is folded (streams/processor.py `_process`, `_write_batch`)."""

import asyncio
from types import SimpleNamespace

from streams.context import StreamContext
from streams.processor import States, _process, _write_batch
from streams.slice import Slice, pack, unpack

KEY_A, KEY_B = b"t/a", b"t/b"


class Table(dict):
    """The processor's table: counts its writes (each is one changelog record in faust)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.writes: list[bytes] = []

    def __setitem__(self, key, value) -> None:
        self.writes.append(key)
        super().__setitem__(key, value)


class Ctx:
    """What the processor uses of `StreamContext`: the memory topic's send, and the real
    `applying` (a record error dead-letters the record through `refuse`)."""

    applying = StreamContext.applying

    def __init__(self) -> None:
        self.memory_events = self
        self.refused: list[tuple[int, str]] = []

    async def send(self, **_) -> None:
        return None

    async def refuse(self, record, reason, detail, *, stage) -> None:
        self.refused.append((record.offset, stage))


def _app(generation: int = 1, active: bool = True):
    return SimpleNamespace(consumer_generation_id=generation, flow_control=SimpleNamespace(is_active=lambda: active))


class _Record:  # a faust event: weakly referenced as the task's current event
    def __init__(self, key: bytes, message) -> None:
        self.key, self.message = key, message


def _record(key: bytes, offset: int, generation: int = 1) -> _Record:
    return _Record(key, SimpleNamespace(topic="conversation", partition=0, offset=offset, generation_id=generation))


def _counter(name: str, dumps: list, seen: list, refuse_above: int | None = None) -> Slice:
    """A slice counting the messages of its conversation; it records the state each fold saw."""

    def dump(key, state):
        dumps.append((name, key, state))
        if refuse_above is not None and state > refuse_above:
            raise ValueError("the codec refuses this state")
        return str(state).encode()

    def fold(state, event, now):
        seen.append((name, state))
        return state + 1, []

    return Slice(name, frozenset({"message.appended"}), lambda key, raw: int(raw) if raw else 0, dump, fold)


def _run(app, ctx, table, slices, records, in_turn_after=None):
    states, pending = States(table), {}
    event = SimpleNamespace(type="message.appended")

    async def main():
        for record in records:
            still = (lambda r=record: in_turn_after is None or r.message.offset < in_turn_after)
            if not await _process(ctx, record, states, slices, event, pending, still):
                break
        await _write_batch(app, ctx, states, {part.name: part for part in slices}, pending)

    asyncio.run(main())


def test_a_batch_writes_each_conversation_once_with_every_record_folded_in_order():
    dumps, seen = [], []
    table = Table({KEY_A: pack({"n": b"10"})})
    part = _counter("n", dumps, seen)
    records = [_record(KEY_A, 0), _record(KEY_B, 1), _record(KEY_A, 2), _record(KEY_A, 3), _record(KEY_B, 4)]
    _run(_app(), Ctx(), table, [part], records)
    assert seen == [("n", 10), ("n", 0), ("n", 11), ("n", 12), ("n", 1)]  # each fold on its predecessor's state
    assert sorted(table.writes) == [KEY_A, KEY_B]  # one write (changelog record) per conversation, not per record
    assert unpack(table[KEY_A]) == {"n": b"13"} and unpack(table[KEY_B]) == {"n": b"2"}
    assert sorted(dumps) == [("n", KEY_A, 13), ("n", KEY_B, 2)]  # each state encoded once a batch


def test_a_conversation_whose_records_are_no_longer_in_turn_is_not_written():
    table = Table({KEY_A: pack({"n": b"10"})})
    part = _counter("n", [], [])
    _run(_app(generation=2), Ctx(), table, [part], [_record(KEY_A, 0, generation=1)])
    assert table.writes == [] and unpack(table[KEY_A]) == {"n": b"10"}  # left to its redelivery


def test_a_record_a_rebalance_cut_off_changes_no_state_and_the_ones_before_it_are_written():
    seen: list = []
    table = Table()
    part = _counter("n", [], seen)
    records = [_record(KEY_A, 0), _record(KEY_A, 1), _record(KEY_A, 2)]
    _run(_app(), Ctx(), table, [part], records, in_turn_after=2)  # offset 2: a rebalance began during its fold
    assert len(seen) == 3 and table.writes == [KEY_A]
    assert unpack(table[KEY_A]) == {"n": b"2"}  # offsets 0 and 1 only


def test_a_slice_whose_codec_refuses_keeps_its_state_and_the_others_are_written():
    dumps: list = []
    table = Table({KEY_A: pack({"n": b"1", "m": b"5"})})
    refusing, fine = _counter("n", dumps, [], refuse_above=2), _counter("m", dumps, [])
    ctx = Ctx()
    _run(_app(), ctx, table, [refusing, fine], [_record(KEY_A, 7), _record(KEY_A, 8)])
    assert ctx.refused == [(8, "agent.process-conversation.n")]  # the conversation's last record, for that slice
    assert unpack(table[KEY_A]) == {"n": b"1", "m": b"7"}

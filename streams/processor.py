"""The conversation processor: one ordered agent runs every slice's fold on one state record."""

from __future__ import annotations

import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.streams import _current_event  # the task-local current event: a table write's partition

from core import telemetry
from runtime.outage import is_transient
from schemas.codec import Event, encode, peek_type
from schemas.envelope import parse_conversation_key
from streams.context import StreamContext
from streams.kafka_transport import in_turn
from streams.slice import Slice, Ticks, pack, unpack
from streams import store
from streams.take import take_ready

log = logging.getLogger(__name__)

AGENT = "process-conversation"
# Per conversation (key tenant/conversation): every slice's state in one framed record
# (streams/slice.py), changelog-backed; its changelog is what a batch replay hands over.
CONVERSATION_TABLE = "conversation-state"
CACHED_CONVERSATIONS = 4096
# The records the processor takes at once (streams/take.py): once a record came, what faust has
# fetched already, up to this many; no timer: the user messages of a burst reach the embedding
# queue together (it sorts them by length into batches of 32), a lone record is folded at once.
BATCH_RECORDS = 128


@dataclass
class Entry:
    """One conversation's record: its bytes (as the table holds them), each slice's state bytes,
    and the states decoded so far (a slice's state is decoded when an event or tick needs it)."""

    raw: bytes | None
    parts: dict[str, bytes]
    states: dict[str, Any] = field(default_factory=dict)


class States:
    """The table's records, decoded on demand and cached while the table still holds the very
    bytes they came from (a recovery or another writer stores new bytes objects)."""

    def __init__(self, table, capacity: int = CACHED_CONVERSATIONS) -> None:
        self.table, self.capacity = table, capacity
        self._cache: OrderedDict[bytes, Entry] = OrderedDict()

    def entry(self, key: bytes, raw: bytes | None = None, *, from_table: bool = True) -> Entry:
        if from_table:
            raw = self.table.get(key)
        cached = self._cache.get(key)
        if cached is not None and cached.raw is raw:
            self._cache.move_to_end(key)
            return cached
        return self._keep(key, Entry(raw, unpack(raw)))

    @staticmethod
    def state(entry: Entry, key: bytes, part: Slice) -> Any:
        if part.name not in entry.states:
            entry.states[part.name] = part.load(key, entry.parts.get(part.name))
        return entry.states[part.name]

    def write(self, key: bytes, entry: Entry, encoded: dict[str, bytes], states: dict[str, Any]) -> None:
        """One table write for every slice the event changed; the others keep their bytes."""
        parts = {**entry.parts, **encoded}
        raw = pack(parts)
        self.table[key] = raw
        self._keep(key, Entry(raw, parts, {**entry.states, **states}))

    def _keep(self, key: bytes, entry: Entry) -> Entry:
        self._cache[key] = entry
        self._cache.move_to_end(key)
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return entry


def register(app: faust.App, ctx: StreamContext, slices: Sequence[Slice]) -> faust.TableT:
    """The processor's table, agent and the slices' timers on `app`; the slices' stages into `ctx`."""
    settings = ctx.settings
    raw_bytes = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    # key_type/value_type bytes make the changelog recovery decode raw too (not JSON). The store is
    # faust's in-memory one, except that a rebalance does not restore a partition this process
    # held through it (streams/store.py: the restore race of issue 22).
    table = app.Table(CONVERSATION_TABLE, default=None, partitions=settings.kafka.partitions, schema=raw_bytes,
                      key_type=bytes, value_type=bytes, store=store.URL)
    states = States(table)
    relevant = frozenset().union(*(part.relevant for part in slices))
    warming = [part for part in slices if part.warm is not None]
    beginning = [part.begin for part in slices if part.begin is not None]
    for part in slices:
        ctx.stages.extend(part.stages)

    firsts: dict[tuple[str, int], int] = {}  # (topic, partition) -> the generation its last record came in

    @app.agent(ctx.conversation_and_memory_events, name=AGENT, concurrency=1)
    async def process_conversation(stream):
        """Ordered per conversation: the records fetched so far taken as a batch (the slices warm
        what the batch needs in one go: one embedding call for its user messages), then each
        record decoded once and folded by every slice on the state its predecessors left, their
        events out first; a conversation's state is written once a batch, after its last record
        of the batch; the batch is acknowledged once every record of it is folded."""
        async for records in take_ready(stream, BATCH_RECORDS):
            batch = []
            for record in records:
                kind = peek_type(record.value)
                if kind is not None and kind not in relevant:
                    continue  # nothing folds it: not even parsed
                event = ctx.decode(record.value, key=record.key)
                if event is not None and event.type in relevant:
                    batch.append((record, event))
            for begin in beginning:
                begin()
            await _warm(states, warming, batch)
            last = {record.key: index for index, (record, _) in enumerate(batch)}
            pending: dict[bytes, Pending] = {}
            for index, (record, event) in enumerate(batch):
                # A rebalance cut the batch off here: this record and the rest are left unwritten and
                # unacknowledged (streams/kafka_transport.py refuses their acks), and the seek that
                # ends the rebalance delivers them again, to this worker or the partition's new owner.
                if not in_turn(app, record.message):
                    _cut_off(record, batch)
                    break
                _log_first(firsts, record.message)
                # The task-local current event faust's own iteration sets: a table write goes to
                # this record's partition of the changelog. Not `stream.current_event`: faust's
                # buffering task sets that one for the next batch meanwhile and reads it back.
                _current_event.set(weakref.ref(record))
                with telemetry.span(f"{AGENT} {event.type}", kind="consumer",  # the append's trace (docs/observability.md)
                                    parent=telemetry.context_of(record.message.headers)):
                    if not await _process(ctx, record, states, slices, event, pending, last[record.key] == index,
                                          lambda: in_turn(app, record.message)):
                        _cut_off(record, batch, pending)
                        break

    for part in slices:
        for ticks in part.ticks:
            _add_timer(app, ctx, states, part, ticks)
    return table


@dataclass
class Pending:
    """One conversation's states within a batch: `base` as the table holds them, `entry` with
    every slice's state after the batch's records folded so far (what its next record of the
    batch folds on), the slices they changed, and those records (in log order)."""

    base: Entry
    entry: Entry
    changed: dict[str, Any] = field(default_factory=dict)
    records: list = field(default_factory=list)


async def _process(ctx: StreamContext, record, states: States, slices: Sequence[Slice], event: Event,
                   pending: dict[bytes, Pending], last: bool = True,
                   still_in_turn: Callable[[], bool] = lambda: True) -> bool:
    """One record (a faust event) of the batch: its slices' folds on the states its conversation's
    earlier records of the batch left (`pending`), and their events; after the conversation's
    `last` record of the batch, its one state write (`_write`). False when a rebalance began
    meanwhile (`still_in_turn`): the record changes no state, the conversation's pending states
    are not written, and its records are left to their redelivery (the events that went out are
    sent again, the same)."""
    key, refused = record.key, _Refused(record)
    held = pending.get(key)
    entry = None if held is None else held.entry
    if entry is None:
        async with ctx.applying(refused, AGENT):  # a record that is not a state record (never written here)
            entry = states.entry(key)
        if entry is None:
            return True
    now = time.time()
    outgoing, changed = [], {}
    for part in slices:
        if event.type not in part.relevant:
            continue
        if part.admit is not None and not await part.admit(event, record.message):
            continue
        async with ctx.applying(refused, f"{AGENT}.{part.name}"):  # refused by this slice only
            state = states.state(entry, key, part)
            inputs = None if part.prepare is None else await part.prepare(state, event)  # e.g. the vector
            with telemetry.span(f"fold {part.name}"):
                if part.prepare is None:
                    new_state, out = part.fold(state, event, now)
                else:
                    new_state, out = part.fold(state, event, now, inputs)
            if new_state != state:
                changed[part.name] = new_state
            outgoing += out
    # Events first, then the state: a crash in between folds the redelivered record again and
    # sends them again (every consumer ignores what it already has), instead of losing them.
    for envelope in outgoing:
        await ctx.memory_events.send(key=key, value=encode(envelope), headers=telemetry.headers())
    if not still_in_turn():
        return False
    if held is None:
        held = pending[key] = Pending(entry, Entry(entry.raw, entry.parts, dict(entry.states)))
    held.records.append(record)
    if changed:
        held.entry.states.update(changed)
        held.changed.update(changed)
    if last:
        await _write(ctx, states, slices, key, pending.pop(key), still_in_turn)
    return True


async def _write(ctx: StreamContext, states: States, slices: Sequence[Slice], key: bytes, held: Pending,
                 still_in_turn: Callable[[], bool]) -> None:
    """A conversation's one table write (changelog record) of the batch, after its last record,
    each changed slice encoded once. A slice whose codec refuses its state: the conversation's
    last record is dead-lettered for that slice, whose state stays as before the batch."""
    encoded = {}
    for part in slices:
        if part.name in held.changed:
            async with ctx.applying(_Refused(held.records[-1]), f"{AGENT}.{part.name}"):
                encoded[part.name] = part.dump(key, held.changed[part.name])  # its codec may seal it
    # No await from this check to the write: a state written is in the producer's buffer before the
    # rebalance's revocation flushes it (faust suspends the flow there, on this event loop). The
    # check is the last record's: a rebalance suspends the flow for every record of the batch.
    if not encoded or not still_in_turn():
        return
    states.write(key, held.base, encoded, {name: held.changed[name] for name in encoded})


def _log_first(firsts: dict, message) -> None:
    """The first record this worker folds of a partition in a generation: where its turn began
    (with the seek's log line in streams/kafka_transport.py, docs/backbone.md 2026-11-28)."""
    turn = (message.topic, message.partition)
    if firsts.get(turn) != message.generation_id:
        firsts[turn] = message.generation_id
        log.info("generation %s: first record folded of %s[%d] is @%d",
                 message.generation_id, message.topic, message.partition, message.offset)


def _cut_off(record, batch: list, pending: dict | None = None) -> None:
    left = len(batch) - [r for r, _ in batch].index(record)
    unwritten = sum(len(held.records) for held in (pending or {}).values())
    log.info("a rebalance cut the batch off at %s[%d]@%d; %d record(s) left to their redelivery, and %d folded"
             " record(s) of %d conversation(s) not written", record.message.topic, record.message.partition,
             record.message.offset, left, unwritten, len(pending or {}))


@dataclass(frozen=True)
class _Refused:
    """What `StreamContext.applying` reads a refused record from (`.current_event.message`)."""

    current_event: Any


async def _warm(states: States, warming: Sequence[Slice], batch: list) -> None:
    """Each warming slice gets (key, state before the batch, event) of the batch's records it
    reads. A state that does not load is left to the fold (which dead-letters the record)."""
    for part in warming:
        items = []
        for record, event in batch:
            if event.type not in part.relevant:
                continue
            try:
                entry = states.entry(record.key)
                items.append((record.key, states.state(entry, record.key, part), event))
            except Exception:  # noqa: BLE001 - the fold meets it again and refuses the record
                continue
        if items:
            await part.warm(items)


def _add_timer(app: faust.App, ctx: StreamContext, states: States, part: Slice, ticks: Ticks) -> None:
    async def tick() -> None:
        """Tick events for the conversations whose state says a request is stuck or due."""
        now = time.time()
        try:
            for key, envelope in ticks.due(_states_of(states, part), now):
                await ctx.memory_events.send(key=key, value=encode(envelope))
        except Exception as exc:  # the broker is away: the next tick sends them again
            if not is_transient(exc):
                raise
            log.warning("%s ticks not sent (%s); retrying at the next tick", part.name, exc)

    tick.__name__ = tick.__qualname__ = f"tick_{part.name}"
    app.timer(interval=ticks.interval_s)(tick)


def _states_of(states: States, part: Slice):
    """(key, state) of every conversation the slice has a state for."""
    for key, raw in list(states.table.items()):
        if raw is None or parse_conversation_key(key) is None:
            continue  # not a conversation's state (a bad key from before keys were checked)
        entry = states.entry(key, raw, from_table=False)
        if part.name in entry.parts:
            yield key, states.state(entry, key, part)

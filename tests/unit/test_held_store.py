"""The processor table's store (streams/store.py): a rebalance restores only what the process
did not hold through it. The race it closes is reproduced on the real stack in
tests/integration/test_rebalance_restore.py; here the rule itself, record by record."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace

from faust.types import TP

from streams.kafka_transport import in_turn
from streams.store import URL, Store

CHANGELOG = "p.g.streams-conversation-state-changelog"


@dataclass
class _Message:
    partition: int
    offset: int
    value: bytes | None


@dataclass
class _Event:
    key: bytes
    value: bytes | None
    message: _Message


def record(partition: int, offset: int, key: bytes, value: bytes | None) -> _Event:
    return _Event(key, value, _Message(partition, offset, value))


def make_store():
    actives: set[TP] = set()
    app = SimpleNamespace(assignor=SimpleNamespace(assigned_actives=lambda: set(actives)))
    store = Store(URL, app, SimpleNamespace(changelog_topic_name=CHANGELOG), table_name="conversation-state")
    return store, actives


def rebalance(store: Store, actives: set[TP], partitions: set[int]) -> None:
    actives.clear()
    actives.update(TP(CHANGELOG, p) for p in partitions)
    asyncio.run(store.on_rebalance(set(actives), set(), set()))


def recovered(store: Store, actives: set[TP]) -> None:
    asyncio.run(store.on_recovery_completed(set(actives), set()))


def apply(store: Store, *events: _Event) -> None:
    store.apply_changelog_batch(list(events), to_key=lambda k: k, to_value=lambda v: v)


def test_a_kept_partition_is_not_restored_over_what_the_process_wrote_since():
    store, actives = make_store()
    rebalance(store, actives, {0, 1})  # the first assignment: nothing held, everything restored
    apply(store, record(0, 0, b"t/a", b"a1"), record(1, 0, b"t/b", b"b1"))
    recovered(store, actives)
    assert store[b"t/a"] == b"a1" and store[b"t/b"] == b"b1"

    store[b"t/a"] = b"a2"  # the processor's write
    rebalance(store, actives, {0, 1})
    assert store.held == {0, 1}
    store[b"t/a"] = b"a3"  # written while the restore runs (faust folds on through a rebalance)
    apply(store, record(0, 0, b"t/a", b"a1"), record(0, 1, b"t/a", b"a2"))  # the older states
    recovered(store, actives)
    assert store[b"t/a"] == b"a3"


def test_a_newly_assigned_partition_is_restored_from_its_beginning():
    store, actives = make_store()
    rebalance(store, actives, {0})
    recovered(store, actives)
    rebalance(store, actives, {0, 1})
    assert store.held == {0}
    apply(store, record(1, 0, b"t/b", b"b1"), record(1, 1, b"t/b", b"b2"))
    recovered(store, actives)
    assert store[b"t/b"] == b"b2"


def test_a_partition_that_left_is_restored_when_it_comes_back():
    """Its owner in between wrote it: the process's memory of it is no longer the latest."""
    store, actives = make_store()
    rebalance(store, actives, {0, 1})
    apply(store, record(1, 0, b"t/b", b"b1"))
    recovered(store, actives)
    rebalance(store, actives, {0})  # partition 1 to another worker; this rebalance's recovery never completes
    rebalance(store, actives, {0, 1})
    assert store.held == {0}
    apply(store, record(1, 0, b"t/b", b"b1"), record(1, 1, b"t/b", b"b-other-owner"))
    recovered(store, actives)
    assert store[b"t/b"] == b"b-other-owner"


def test_a_record_is_in_turn_only_in_the_current_generation_with_the_flow_running():
    flow = SimpleNamespace(active=True)
    app = SimpleNamespace(consumer_generation_id=3, flow_control=SimpleNamespace(is_active=lambda: flow.active))
    assert in_turn(app, SimpleNamespace(generation_id=3))
    assert not in_turn(app, SimpleNamespace(generation_id=2))  # fetched before the last rebalance
    flow.active = False  # partitions revoked: a rebalance is under way
    assert not in_turn(app, SimpleNamespace(generation_id=3))

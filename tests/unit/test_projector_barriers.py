"""A projector group applies the log in its order around a record one projector takes alone."""

import asyncio

from aiokafka.structs import ConsumerRecord

from core.settings import Settings
from projections.runner import ProjectorGroup, barrier_segments


def record(offset: int, value: bytes, partition: int = 0) -> ConsumerRecord:
    return ConsumerRecord("t", partition, offset, 0, 0, b"k", value, None, 0, 1, [])


class Lone:
    """Takes records starting with b"E" alone (as the erasure projector does)."""

    name = "lone"

    def topics(self, settings) -> list[str]:
        return ["t"]

    def shares_transaction(self, records) -> bool:
        return not any(r.value.startswith(b"E") for r in records)


class Plain:
    name = "plain"

    def topics(self, settings) -> list[str]:
        return ["t"]


def test_the_batch_is_cut_around_each_record_a_projector_takes_alone():
    records = [record(0, b"m"), record(1, b"m"), record(2, b"E"), record(3, b"m"), record(4, b"E"), record(5, b"E")]
    segments = barrier_segments(records, [Plain(), Lone()])
    assert [[r.offset for r in s] for s in segments] == [[0, 1], [2], [3], [4], [5]]
    assert barrier_segments(records[:2], [Plain(), Lone()]) == [records[:2]]
    assert barrier_segments(records, [Plain()]) == [records]


class FakeRunner:
    def __init__(self, projector, journal: list) -> None:
        self.projector, self.journal, self.done = projector, journal, -1

    def fresh(self, records):
        return [r for r in records if r.offset > self.done]

    async def process(self, records) -> None:
        fresh = self.fresh(records)
        if fresh:
            await asyncio.sleep(0.01 if self.projector.name == "plain" else 0)  # the lone one is quicker
            self.journal.append((self.projector.name, [r.offset for r in fresh]))
            self.done = fresh[-1].offset


def test_every_projector_applies_what_precedes_a_barrier_before_the_barrier_itself():
    journal: list = []
    plain, lone = Plain(), Lone()
    group = ProjectorGroup(Settings(), [plain, lone], runners=[FakeRunner(plain, journal), FakeRunner(lone, journal)])

    async def no_shared_connection(work) -> None:
        raise RuntimeError("the fake runners have no connection to share")

    group._apply_together = no_shared_connection  # noqa: SLF001 - so each applies in its own, the careful way
    asyncio.run(group.apply([record(0, b"m"), record(1, b"m"), record(2, b"E"), record(3, b"m")]))
    position = {(name, tuple(offsets)): i for i, (name, offsets) in enumerate(journal)}
    assert set(position) == {("plain", (0, 1)), ("lone", (0, 1)), ("plain", (2,)), ("lone", (2,)),
                             ("plain", (3,)), ("lone", (3,))}, journal
    # What precedes the barrier is in, for every projector, before the lone one applies it
    # (the plain one is slower: run side by side, the barrier would come first) ...
    assert position[("plain", (0, 1))] < position[("lone", (2,))]
    assert position[("plain", (2,))] < position[("lone", (2,))]  # those that share go first
    # ... and nothing after it is applied before it.
    assert position[("lone", (2,))] < position[("plain", (3,))]

"""The final fold states of one partition's conversations, handed over as the processor's records."""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka import AIOKafkaProducer

from memory_agent.batch_replay.produce import send_all
from streams.slice import pack


class StateRecords:
    """Each system's batch adds its conversations' final states (encoded by its slice's codec);
    `write` sends one record per conversation to the processor's table changelog
    (streams/processor.py), as the processor would have written it."""

    def __init__(self) -> None:
        self.parts: dict[bytes, dict[str, bytes]] = {}

    def add(self, slice_name: str, states: Iterable[tuple[bytes, bytes]]) -> None:
        for key, raw in states:
            self.parts.setdefault(key, {})[slice_name] = raw

    async def write(self, producer: AIOKafkaProducer, changelog: str, partition: int) -> None:
        await send_all(producer, changelog, partition, ((key, pack(parts)) for key, parts in self.parts.items()))
        self.parts = {}

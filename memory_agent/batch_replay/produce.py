"""Records into one partition in producer batches: a `send` per record (its metadata check and
future) cost the batch replay more than the record itself."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka import AIOKafkaProducer


async def send_all(producer: AIOKafkaProducer, topic: str, partition: int,
                   records: Iterable[tuple[bytes | None, bytes]]) -> list[int]:
    """Append `(key, value)` records to `topic`/`partition` in order; returns each one's offset
    once all are acknowledged (a batch's records take consecutive offsets from its base)."""
    sent: list[tuple[asyncio.Future, int]] = []  # (acknowledgement, records in the batch)
    batch, count = producer.create_batch(), 0
    for key, value in records:
        if batch.append(key=key, value=value, timestamp=None) is not None:
            count += 1
            continue
        if count:
            sent.append((await producer.send_batch(batch, topic, partition=partition), count))
            batch, count = producer.create_batch(), 0
            if batch.append(key=key, value=value, timestamp=None) is not None:
                count = 1
                continue
        # Bigger than a batch: the producer's own path (it refuses what the broker would).
        sent.append((await producer.send(topic, value, key=key, partition=partition), 1))
    if count:
        sent.append((await producer.send_batch(batch, topic, partition=partition), count))
    offsets: list[int] = []
    for acknowledged, n in sent:
        base = (await acknowledged).offset
        offsets.extend(range(base, base + n))
    return offsets

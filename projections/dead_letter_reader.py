"""Reads the newest records of the dead-letter topic back (the operator's view of refused input).

No consumer group: the reader assigns every partition, seeks to at most `per_partition`
records before the end, reads up to the end offsets it saw at the start, and commits nothing.
"""

from __future__ import annotations

import asyncio
import base64
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from runtime.dead_letter import decode_dead_letter


@dataclass
class DeadLetters:
    total: int = 0  # records in the topic (end offsets minus log starts: what retention kept)
    scanned: int = 0  # the newest records read back
    letters: list[dict[str, Any]] = field(default_factory=list)  # newest first, at most `limit`
    by_reason: Counter = field(default_factory=Counter)  # over the scanned records
    by_stage: Counter = field(default_factory=Counter)


def describe(value: bytes, partition: int, offset: int, timestamp_ms: int) -> dict[str, Any]:
    """One letter as the API shows it: reason, stage, source, and the original bytes in base64."""
    try:
        letter = decode_dead_letter(value)
    except Exception as exc:  # noqa: BLE001 - a letter that is not ours is shown, not hidden
        return {"partition": partition, "offset": offset, "timestamp_ms": timestamp_ms, "reason": "unreadable",
                "detail": f"{type(exc).__name__}: {exc}", "stage": None, "source": None, "key": None,
                "original_base64": base64.b64encode(value).decode(), "original_size": len(value),
                "original_sha256": None, "original_truncated": False, "dead_lettered_at": None}
    raw = letter.pop("original_bytes")
    return {"partition": partition, "offset": offset, "timestamp_ms": timestamp_ms,
            "reason": letter.get("reason"), "detail": letter.get("detail"), "stage": letter.get("stage"),
            "source": letter.get("source"), "key": letter.get("key"),
            "original_base64": base64.b64encode(raw).decode(), "original_size": letter.get("original_size"),
            "original_sha256": letter.get("original_sha256"),
            "original_truncated": bool(letter.get("original_truncated")),
            "dead_lettered_at": letter.get("dead_lettered_at")}


async def read_recent(bootstrap: str, topic: str, *, limit: int, per_partition: int = 1000,
                      tenant: str | None = None, timeout_s: float = 10.0) -> DeadLetters:
    """The newest letters (all tenants, or those whose source key is `tenant`/...)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    await consumer.start()
    out = DeadLetters()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        if not partitions:
            await consumer._client.force_metadata_update()  # noqa: SLF001 - a topic created since start
            partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return out
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        out.total = sum(ends[tp] - starts[tp] for tp in tps)
        wanted = {tp: max(starts[tp], ends[tp] - per_partition) for tp in tps if ends[tp] > starts[tp]}
        if not wanted:
            return out
        consumer.assign(list(wanted))
        for tp, offset in wanted.items():
            consumer.seek(tp, offset)
        prefix = None if tenant is None else f"{tenant}/"
        pending = set(wanted)
        async with asyncio.timeout(timeout_s):
            while pending:
                batches = await consumer.getmany(*pending, timeout_ms=500)
                for tp, records in batches.items():
                    for record in records:
                        if record.offset >= ends[tp]:
                            continue
                        item = describe(record.value or b"", tp.partition, record.offset, record.timestamp)
                        if prefix is not None and not (item["key"] or "").startswith(prefix):
                            continue
                        out.scanned += 1
                        out.by_reason[item["reason"]] += 1
                        out.by_stage[item["stage"]] += 1
                        out.letters.append(item)
                for tp in list(pending):
                    if await consumer.position(tp) >= ends[tp]:
                        pending.discard(tp)
    finally:
        await consumer.stop()
    out.letters.sort(key=lambda item: (item["timestamp_ms"], item["partition"], item["offset"]), reverse=True)
    del out.letters[limit:]
    return out


__all__ = ["DeadLetters", "describe", "read_recent"]

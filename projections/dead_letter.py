"""Dead-letter records: the original bytes, where they came from, and why they were refused."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.structs import ConsumerRecord


@dataclass(frozen=True)
class DeadLetter:
    record: ConsumerRecord
    reason: str
    detail: str


def dead_letter_value(letter: DeadLetter, *, stage: str) -> bytes:
    """JSON a human can read; the original value is kept verbatim (base64 if not UTF-8)."""
    raw = letter.record.value or b""
    try:
        original, encoding = raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        original, encoding = base64.b64encode(raw).decode(), "base64"
    return orjson.dumps(
        {
            "reason": letter.reason,
            "detail": letter.detail,
            "stage": stage,
            "source": {
                "topic": letter.record.topic,
                "partition": letter.record.partition,
                "offset": letter.record.offset,
            },
            "original": original,
            "original_encoding": encoding,
            "dead_lettered_at": datetime.now(UTC).isoformat(),
        }
    )


def decode_dead_letter(value: bytes) -> dict:
    letter = orjson.loads(value)
    if letter["original_encoding"] == "base64":
        letter["original_bytes"] = base64.b64decode(letter["original"])
    else:
        letter["original_bytes"] = letter["original"].encode("utf-8")
    return letter


async def publish(producer: AIOKafkaProducer, topic: str, letters: list[DeadLetter], *, stage: str) -> None:
    """Send and wait for the broker's ack of every letter (at-least-once, before the offset commit)."""
    futures = [
        await producer.send(
            topic,
            value=dead_letter_value(letter, stage=stage),
            key=letter.record.key,
            headers=[("reason", letter.reason.encode())],
        )
        for letter in letters
    ]
    for future in futures:
        await future

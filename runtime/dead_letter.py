"""Dead-letter records: the original bytes, where they came from, and why they were refused.

A letter always fits a record: when the original would make it larger than
`max_dead_letter_bytes`, the letter carries a cut original (`original_truncated`) with the
size and SHA-256 of the whole, and the source topic/partition/offset to fetch it from.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from schemas.limits import DEFAULT_MAX_DEAD_LETTER_BYTES

MAX_DETAIL_CHARS = 2000
MAX_KEY_BYTES = 1024


@dataclass(frozen=True)
class DeadLetter:
    record: ConsumerRecord
    reason: str
    detail: str


def dead_letter_value(letter: DeadLetter, *, stage: str, max_bytes: int = DEFAULT_MAX_DEAD_LETTER_BYTES) -> bytes:
    """JSON a human can read; the original value is kept verbatim (base64 if not UTF-8), or
    cut to fit `max_bytes` with its size and hash."""
    record = letter.record
    raw = record.value or b""
    try:
        original, encoding = raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        original, encoding = base64.b64encode(raw).decode(), "base64"
    key = record.key
    body = {
        "reason": letter.reason,
        "detail": letter.detail[:MAX_DETAIL_CHARS],
        "stage": stage,
        "source": {"topic": record.topic, "partition": record.partition, "offset": record.offset},
        "key": None if key is None else key[:MAX_KEY_BYTES].decode("utf-8", "replace"),
        "original": original,
        "original_encoding": encoding,
        "original_size": len(raw),
        "original_sha256": hashlib.sha256(raw).hexdigest(),
        "original_truncated": False,
        "dead_lettered_at": datetime.now(UTC).isoformat(),
    }
    value = orjson.dumps(body)
    if len(value) <= max_bytes:
        return value
    # Too large: cut the original until the letter fits (escaping makes the ratio uneven).
    body["original_truncated"] = True
    budget = max_bytes - (len(value) - len(orjson.dumps(original))) - 64
    cut = min(len(original), max(budget, 0) // 2)
    while cut > 0:
        if encoding == "base64":
            cut -= cut % 4  # whole base64 quanta still decode
        escaped = len(orjson.dumps(original[:cut]))
        if escaped <= budget:
            break
        cut = cut * budget // escaped - 1
    body["original"] = original[:max(cut, 0)]
    return orjson.dumps(body)


def decode_dead_letter(value: bytes) -> dict:
    letter = orjson.loads(value)
    if letter["original_encoding"] == "base64":
        letter["original_bytes"] = base64.b64decode(letter["original"])
    else:
        letter["original_bytes"] = letter["original"].encode("utf-8")
    return letter


def letter_key(record: ConsumerRecord) -> bytes | None:
    """The source's key, unless it is too long to be one (a poison record's key can be)."""
    key = record.key
    return key if key is None or len(key) <= MAX_KEY_BYTES else hashlib.sha256(key).hexdigest().encode()


async def publish(
    producer: AIOKafkaProducer, topic: str, letters: list[DeadLetter], *, stage: str,
    max_bytes: int = DEFAULT_MAX_DEAD_LETTER_BYTES,
) -> None:
    """Send and wait for the broker's ack of every letter (at-least-once, before the offset commit)."""
    futures = [
        await producer.send(
            topic,
            value=dead_letter_value(letter, stage=stage, max_bytes=max_bytes),
            key=letter_key(letter.record),
            headers=[("reason", letter.reason.encode())],
        )
        for letter in letters
    ]
    for future in futures:
        await future

"""What the poison rules (schemas/limits.py) cost per decoded event, on one core.

    python -m bench.validation_bench --events 20000

For a few typical events: the whole `decode` as every consumer runs it (rules and key
check included), and the rules alone (the prefilter on the raw bytes, the integer check
or the text walk, the metadata size, the key), each timed directly as the best of
25 runs (the machine may be shared: the direct timing of the rules is the figure to
trust, a whole decode moves with the load).
"""

from __future__ import annotations

import argparse
import platform
import timeit
from datetime import UTC, datetime

from schemas import topic_events as te
from schemas.codec import decode, encode, new_event
from schemas.events import MessageAppended
from schemas.limits import DEFAULT_LIMITS, check_integers, check_key, check_metadata, check_storable, raw_needs_walk
from schemas.registry import MESSAGE_APPENDED

KEY = b"tenant-a/conv-42"


def _samples() -> dict[str, bytes]:
    def message(content: str, metadata: dict | None = None) -> bytes:
        return encode(new_event(MESSAGE_APPENDED, MessageAppended(role="user", content=content, metadata=metadata or {}),
                                tenant_id="tenant-a", conversation_id="conv-42", user_id="user-7", seq=7,
                                occurred_at=datetime(2026, 11, 26, tzinfo=UTC)))
    embedded = encode(new_event(te.TOPIC_MESSAGE_EMBEDDED, te.TopicMessageEmbedded(
        seq=7, embedding=[0.0123456789 * (i % 7) for i in range(384)], model="m"),
        tenant_id="tenant-a", conversation_id="conv-42", user_id="user-7", seq=7))
    return {
        "message, 60 chars": message("How do I keep tomatoes from splitting after heavy rain?"),
        "message + metadata": message("ok", {"client": "web", "sent_at_ms": 1764150000, "tags": ["a", "b"]}),
        # A literal backslash before "u0000": the raw prefilter cannot tell, the text walk runs.
        "message, text walk tripped": message("see C:\\u0000\\notes.txt"),
        "topic embedding, 384 floats": embedded,
        "message, 32,000 chars": message("lorem ipsum " * 2666),
    }


def _best_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=25)) / number * 1e6


def _rules(value: bytes):
    event = decode(value)

    def run() -> None:
        if raw_needs_walk(value):
            check_storable(event.envelope, event.payload)
        else:
            check_integers(event.envelope, event.payload)
        if isinstance(event.payload, MessageAppended):
            check_metadata(event.payload.metadata, DEFAULT_LIMITS, len(value))
        check_key(KEY, event.envelope)
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {platform.machine()}")
    print(f"{'event':30} {'bytes':>7} {'decode µs':>10} {'rules µs':>9} {'share':>6}")
    for name, value in _samples().items():
        number = max(20, args.events // 25 // (20 if len(value) > 10_000 else 1))
        whole = _best_us(lambda: decode(value, key=KEY), number)
        rules = _best_us(_rules(value), number)
        print(f"{name:30} {len(value):7} {whole:10.2f} {rules:9.2f} {rules / whole:6.1%}")


if __name__ == "__main__":
    main()

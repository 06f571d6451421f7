"""What the poison rules (schemas/limits.py) cost per decoded event, on one core.

    python -m bench.validation_bench --events 50000

Decodes the same events (a) as every consumer now does (rules and key check) and (b)
with the checks of texts and integers and the key check left out (best of interleaved
runs, as the machine may be shared), and prints µs per
event for a chat message, a message with metadata, one whose raw bytes trip the walk's
prefilter, a topic embedding (384 floats) and a 32,000-character message.
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import UTC, datetime

from schemas import topic_events as te
from schemas.codec import decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED


def _samples() -> dict[str, bytes]:
    def message(content: str, metadata: dict | None = None, seq: int = 7) -> bytes:
        return encode(new_event(MESSAGE_APPENDED, MessageAppended(role="user", content=content, metadata=metadata or {}),
                                tenant_id="tenant-a", conversation_id="conv-42", user_id="user-7", seq=seq,
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


def _per_event_us(fn, value: bytes, events: int, repeats: int = 5) -> float:
    """The best of `repeats` runs (the machine may be shared)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(events // repeats):
            fn(value)
        best = min(best, (time.perf_counter() - start) / (events // repeats) * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=50_000)
    args = parser.parse_args()
    import schemas.codec as codec

    print(f"python {platform.python_version()}, {platform.machine()}, {args.events} decodes per row")
    print(f"{'event':32} {'bytes':>7} {'with rules µs':>14} {'without µs':>11} {'cost':>7}")
    for name, value in _samples().items():
        key = b"tenant-a/conv-42"
        events = max(1000, args.events // (10 if len(value) > 10_000 else 1))
        walk, integers = codec.check_storable, codec.check_integers
        with_rules = without = float("inf")
        for _ in range(3):  # interleaved, so a busy moment hits both
            with_rules = min(with_rules, _per_event_us(lambda v: decode(v, key=key), value, events))
            codec.check_storable = codec.check_integers = lambda *a: None
            try:
                without = min(without, _per_event_us(decode, value, events))
            finally:
                codec.check_storable, codec.check_integers = walk, integers
        print(f"{name:32} {len(value):7} {with_rules:14.2f} {without:11.2f} {with_rules / without - 1:7.0%}")


if __name__ == "__main__":
    main()

"""What sealing message content costs (docs/lineage.md, crypto-shredding): encoding a
`message.appended` event plain vs sealed with its author's key (AES-256-GCM), and decoding it
plain vs opening it in the shared decode. Keys come from an in-process store (the Postgres
store caches them per process: a cache hit is what steady state pays).

    python -m bench.seal_bench --chars 400

Best of 25 runs of 500 calls each (the machine may be shared: best-of is the figure to trust)."""

from __future__ import annotations

import argparse
import os
import platform
import timeit

from memory_agent.privacy import opener, seal
from schemas import sealed
from schemas.codec import decode, encode, encode_checked, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED


class _Keys:
    def __init__(self) -> None:
        self.key = os.urandom(32)

    def get_or_create(self, tenant, user):
        return "k1", self.key

    def get(self, tenant, user, key_id):
        return self.key


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chars", type=int, default=400)
    args = parser.parse_args()
    keys = _Keys()
    envelope = new_event(MESSAGE_APPENDED, MessageAppended(role="user", content="w" * args.chars,
                                                           metadata={"client": "bench"}),
                         tenant_id="t", conversation_id="c", user_id="u", seq=1)
    plain, closed = encode(envelope), encode(seal(envelope, keys))
    cases = {
        "encode plain": lambda: encode_checked(envelope),
        "encode sealed": lambda: (encode_checked(envelope), encode(seal(envelope, keys))),
        "decode plain": lambda: decode(plain),
    }
    results = {name: min(timeit.repeat(fn, number=500, repeat=25)) / 500 * 1e6 for name, fn in cases.items()}
    sealed.set_opener(opener(keys))
    results["decode sealed (opened)"] = min(timeit.repeat(lambda: decode(closed), number=500, repeat=25)) / 500 * 1e6
    sealed.set_opener(None)
    print(f"{platform.platform()}, {os.cpu_count()} cpus; content {args.chars} chars,"
          f" event {len(plain)} B plain / {len(closed)} B sealed")
    for name, micros in results.items():
        print(f"{name:24s} {micros:8.1f} µs")


if __name__ == "__main__":
    main()

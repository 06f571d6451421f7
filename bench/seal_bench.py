"""What sealing costs (docs/lineage.md, crypto-shredding): encoding a `message.appended` event
plain vs sealed with its author's key (AES-256-GCM), and decoding it plain vs opening it in the
shared decode; the same for a derived `summary.completed` (its text sealed under one key, and
under a key derived from two users' keys), and a topic fold state (`--state-topics` topics with
384-dim centroids) sealed for its changelog. Keys come from an in-process store (the Postgres
store caches them per process: a cache hit is what steady state pays).

    python -m bench.seal_bench --chars 400

Best of 25 runs of 500 calls each (the machine may be shared: best-of is the figure to trust)."""

from __future__ import annotations

import argparse
import os
import platform
import timeit

from core import sealing
from core.privacy import opener, seal
from schemas import sealed
from schemas.codec import decode, encode, encode_checked, new_event
from schemas.events import MessageAppended, SummaryCompleted
from schemas.registry import MESSAGE_APPENDED, SUMMARY_COMPLETED


class _Keys:
    def __init__(self) -> None:
        self.key = os.urandom(32)

    def get_or_create(self, tenant, user):
        return "k1", self.key

    def get(self, tenant, user, key_id):
        return self.key

    def live(self, tenant, user):
        return f"k-{user}", self.key


class _Writers:
    def __init__(self, users):
        self.users = set(users)

    def of(self, tenant, conversation):
        return self.users


def _timed(fn) -> float:
    return min(timeit.repeat(fn, number=500, repeat=25)) / 500 * 1e6


def derived(chars: int, keys: _Keys) -> dict[str, float]:
    """A summary of `chars` characters: encode/decode plain, sealed under 1 and under 2 keys."""
    envelope = new_event(SUMMARY_COMPLETED, SummaryCompleted(
        memory_id=1, start_seq=0, end_seq=9, text="w" * chars, generation_time_ms=1, prompt_version="p", model="m",
        source_event_ids=[f"e{i}" for i in range(10)]), tenant_id="t", conversation_id="c", user_id="u", seq=9)
    out = {"summary encode plain": _timed(lambda: encode(envelope))}
    plain = encode(envelope)
    out["summary decode plain"] = _timed(lambda: decode(plain))
    sealed.set_field_opener(sealing.field_opener(keys))
    for users in (["u"], ["u", "v"]):
        sealed.set_sealer(sealing.sealer(keys, _Writers(users)))
        closed = encode(envelope)
        out[f"summary encode sealed ({len(users)} key)"] = _timed(lambda: encode(envelope))
        out[f"summary decode opened ({len(users)} key)"] = _timed(lambda: decode(closed))
        out[f"summary bytes sealed ({len(users)} key)"] = len(closed)
    out["summary bytes plain"] = len(plain)
    sealed.set_sealer(None)
    sealed.set_field_opener(None)
    return out


def state(topics: int, keys: _Keys) -> dict[str, float]:
    """A topic fold state (changelog value) of `topics` topics sealed and opened, 2 writers."""
    import orjson
    raw = orjson.dumps({"format": 1, "topics": [{"title": "t" * 60, "summary": "s" * 800,
                                                 "centroid": "A" * 2048} for _ in range(topics)]})
    sealed.set_state_hooks(sealing.state_sealer(keys, _Writers(["u", "v"])), sealing.state_opener(keys))
    closed = sealed.seal_state(b"t/c", raw)
    out = {f"state seal ({len(raw)} B)": _timed(lambda: sealed.seal_state(b"t/c", raw)),
           "state open": _timed(lambda: sealed.open_state(b"t/c", closed))}
    sealed.set_state_hooks(None, None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chars", type=int, default=400)
    parser.add_argument("--state-topics", type=int, default=8)
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
    results |= derived(args.chars, keys) | state(args.state_topics, keys)
    print(f"{platform.platform()}, {os.cpu_count()} cpus; content {args.chars} chars,"
          f" event {len(plain)} B plain / {len(closed)} B sealed")
    for name, micros in results.items():
        print(f"{name:34s} {micros:8.1f} {'B' if 'bytes' in name else 'µs'}")


if __name__ == "__main__":
    main()

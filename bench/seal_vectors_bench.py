"""What sealing the vectors with their texts costs (docs/lineage.md, crypto-shredding): the
size and encode/decode time of a `chunk.recorded` (summary + facts, each with its embedding)
plain and sealed for two users, in process (keys in memory).

    python -m bench.seal_vectors_bench

Best of 5 × 20 calls per figure; the machine may be shared (best-of is the figure to trust)."""

from __future__ import annotations

import os
import platform
import timeit
from datetime import UTC, datetime

import numpy as np

from domain.facts import ids
from core import sealing
from schemas import facts_events as fe
from schemas import sealed
from schemas.codec import decode, encode, new_event

rng = np.random.default_rng(1)


class _Keys:
    def __init__(self) -> None:
        self.keys = {}

    def live(self, tenant, user):
        return self.keys.setdefault((tenant, user), (os.urandom(4).hex(), os.urandom(32)))

    def get(self, tenant, user, key_id):
        found = self.keys.get((tenant, user))
        return found[1] if found and found[0] == key_id else None


class _Known:
    def of(self, tenant, conversation):
        return {"alice", "bob"}


def _vector(dimensions: int) -> fe.Vector:
    v = rng.normal(size=dimensions).astype(np.float32)
    return ids.to_vector(v / np.linalg.norm(v), "m")


def chunk(dimensions: int, facts: int):
    recorded = [fe.RecordedFact(fact_id=f"f{i}", category="other", importance=3, embedding=_vector(dimensions),
                                content=f"The user likes thing number {i} quite a lot.") for i in range(facts)]
    payload = fe.ChunkRecorded(
        chunk_id="c", start_seq=0, end_seq_exclusive=20, attempt=1, owner_user_id="alice", subject_id="s",
        summary="A summary of twenty messages. " * 10, embedding=_vector(dimensions), facts=recorded,
        gate=fe.GateVerdict(worth_remembering=True, method="off"), extractor="llm", model="m", prompt_version="p",
        source_event_ids=[f"e{i}" for i in range(20)], observed_at=datetime.now(UTC), generation_time_ms=1)
    return new_event(fe.CHUNK_RECORDED, payload, tenant_id="t", conversation_id="c", user_id="alice", seq=19)


def best(call) -> float:
    return min(timeit.repeat(call, number=20, repeat=5)) / 20


def main() -> None:
    print(f"{platform.node()} {platform.platform()} cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
    keys = _Keys()
    for dimensions, facts in ((384, 20), (1536, 10), (1536, 14)):
        event = chunk(dimensions, facts)
        plain = encode(event)
        plain_encode = best(lambda: encode(event))
        sealed.set_sealer(sealing.sealer(keys, _Known()))
        sealed.set_field_opener(sealing.field_opener(keys))
        try:
            raw = encode(event)
            sealed_encode, sealed_decode = best(lambda: encode(event)), best(lambda: decode(raw))
        finally:
            sealed.set_sealer(None)
            sealed.set_field_opener(None)
        print(f"chunk.recorded, {dimensions} dims, {facts} facts: {len(plain):,} -> {len(raw):,} bytes"
              f" ({len(raw) / len(plain):.2f}x); encode {plain_encode * 1e3:.2f} -> {sealed_encode * 1e3:.2f} ms,"
              f" sealed decode {sealed_decode * 1e3:.2f} ms")


if __name__ == "__main__":
    main()

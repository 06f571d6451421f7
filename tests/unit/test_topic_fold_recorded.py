"""The topic fold's outputs on a generated conversation, recorded from the fold before its CPU
work (docs/topics.md, "The topic fold's CPU"): a faster fold must give the same topics, the same
assignments, the same events byte for byte and the same changelog state (replay equivalence is
public behaviour). Event ids and the wall-clock `occurred_at` of derived events are random in
any run, so they are set to fixed values before the bytes are compared.

The digest is over a canonical form: every float rounded to 6 decimals (the packed float32
vectors of the state unpacked first), keys sorted. numpy's vector arithmetic differs in the last
bits from one CPU's SIMD to another's (the same fold recorded on an AVX2 machine and run on an
AVX-512 one gave other bytes, old fold and new alike), and that noise is not a change of output."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import numpy as np
import orjson
import pytest

from core.settings import Settings
from schemas import topic_events as te
from schemas.codec import decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.topics_memory import codec
from streams.topics_memory.agent import AgentConfig, handle, wants_embedding
from streams.topics_memory.codec import unpack_vector
from streams.topics_memory.stage import embedded_of

T0 = 1_750_000_000.0
FIXED = datetime(2026, 1, 1, tzinfo=UTC)


def _config(centred: bool) -> AgentConfig:
    settings = Settings(topics={"center_on_conversation": centred, "active_topic_bonus": 0.05,
                                "similarity_threshold": 0.3, "max_topics": 6})
    return AgentConfig.from_settings(settings, model="stub", prompt_version="topic-summary-v1")


def _answer(request) -> bytes | None:
    e, p = request.envelope, request.payload
    if request.type != te.TOPIC_COMPACTION_REQUESTED:
        return None
    payload = te.TopicCompacted(topic_id=p.topic_id, upto_seq=p.upto_seq, archived_seqs=p.seqs,
                                summary=f"summary of {p.topic_id} up to {p.upto_seq}", attempt=p.attempt,
                                prompt_version=p.prompt_version, model=p.model, generation_time_ms=1)
    return encode(new_event(te.TOPIC_COMPACTED, payload, tenant_id=e.tenant_id, conversation_id=e.conversation_id,
                            user_id="system", seq=e.seq, event_id="answer", occurred_at=FIXED))


PACKED = frozenset({"centroid", "background", "embedding"})  # vectors the state packs as base64 float32


def canonical(value, key: str | None = None):
    """`value` (parsed JSON) with every float rounded to 6 decimals (-0.0 as 0.0) and the packed
    vectors unpacked: what the fold decided, without the last bits of the CPU's float arithmetic."""
    if isinstance(value, float):
        return round(value, 6) + 0.0
    if isinstance(value, str) and key in PACKED:
        return [round(x, 6) + 0.0 for x in unpack_vector(value)]
    if isinstance(value, dict):
        return {k: canonical(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def canonical_bytes(raw: bytes) -> bytes:
    return orjson.dumps(canonical(orjson.loads(raw)), option=orjson.OPT_SORT_KEYS)


def fold_digest(centred: bool, conversations: int = 3, turns: int = 70) -> str:
    """sha256 over every event the fold emits and every changelog state it writes, in order
    (each in its canonical form)."""
    config = _config(centred)
    rng = np.random.default_rng(22)
    centres = [rng.normal(size=32) for _ in range(7)]
    inputs, vectors = [], {}
    for turn in range(turns):
        for c in range(conversations):
            name = f"conv-{c}"
            for offset, role in ((0, "user"), (1, "assistant")):
                seq = 2 * turn + offset
                text = f"{role} says {turn} about subject {(c + turn // 5) % 7}. More words follow here."
                if turn % 17 == 9 and role == "user":
                    text = "Different subject: " + text
                inputs.append(encode(new_event(MESSAGE_APPENDED, MessageAppended(role=role, content=text),
                                               tenant_id="t", conversation_id=name, user_id="u", seq=seq,
                                               event_id=f"m-{name}-{seq}",
                                               occurred_at=datetime.fromtimestamp(T0 + seq * 400 * (1 + turn % 3), UTC))))
                vectors[(name, seq)] = centres[(c + turn // 5) % 7] + rng.normal(size=32) * 0.7
    states: dict[str, codec.AgentState] = {}
    digest = hashlib.sha256()
    pending = list(reversed(inputs))
    while pending:
        event = decode(pending.pop())
        name = event.envelope.conversation_id
        state = states.get(name) or codec.loads(None, name)
        embedded = embedded_of(vectors[(name, event.envelope.seq)]) if wants_embedding(state, event) else None
        state, outgoing = handle(config, state, event, T0 + 1e6, embedded)
        states[name] = state
        replies = []
        for envelope in outgoing:
            value = encode(envelope.model_copy(update={"event_id": "x", "occurred_at": FIXED}))
            digest.update(canonical_bytes(value))
            derived = decode(value)  # every event the fold built passes the strict decoding, field for field
            assert derived.payload.model_dump(mode="json") == envelope.payload, envelope.type
            reply = _answer(derived)
            if reply is not None:
                replies.append(reply)
        pending.extend(reversed(replies))
        digest.update(canonical_bytes(codec.dumps(state)))
    return digest.hexdigest()


# Recorded from main 43dc75c's fold (before the CPU work), this generator, these settings, in the
# canonical form: the same digests under OpenBLAS's SkylakeX, Haswell and Zen kernels
# (OPENBLAS_CORETYPE; the raw bytes differ between the first and the other two).
RECORDED = {
    False: "4af48e8641cefc67395650375d8c06ce48ce0e40f9c2a1bf4d6de006e87e93e8",
    True: "2a6522937ee971892ce385002348d6d48191f7a20025708fb1126c900f99c842",
}


@pytest.mark.parametrize("centred", [False, True])
def test_fold_outputs_match_the_recorded_fold(centred):
    assert fold_digest(centred) == RECORDED[centred]


def _reference_best_match(state, unit, active_bonus=0.0, background=None):
    """best_match as it was before the matrix (main 43dc75c): one topic at a time."""
    best, best_score, best_similarity = None, -float("inf"), -float("inf")
    probe = unit if background is None else unit - background
    probe_norm = float(np.linalg.norm(probe))
    for topic in state.topics:
        centroid = np.asarray(topic.centroid, dtype=np.float64)
        if background is None:
            similarity = min(1.0, max(-1.0, float(centroid @ unit)))
        else:
            rest = centroid * topic.mean_norm - background
            scale = probe_norm * float(np.linalg.norm(rest))
            similarity = min(1.0, max(-1.0, float(rest @ probe) / scale)) if scale > 1e-12 else 0.0
        score = similarity + (active_bonus if topic.topic_id == state.active_topic_id else 0.0)
        if score > best_score:
            best, best_score, best_similarity = topic, score, similarity
    return best, best_similarity


@pytest.mark.parametrize("centred", [False, True])
def test_best_match_is_the_per_topic_loop_even_on_ties(centred):
    from domain.topics.fold import best_match
    from domain.topics.state import Topic, TopicsState

    rng = np.random.default_rng(7)
    for trial in range(60):
        count = int(rng.integers(1, 12))
        directions = [rng.normal(size=16) for _ in range(count)]
        if count > 2:  # exact duplicates and a message equal to a topic: ties and a cosine of 1
            directions[-1] = directions[0]
        topics = []
        for i, d in enumerate(directions):
            d = d / np.linalg.norm(d)
            topics.append(Topic(f"c:topic-{i}", "t", tuple(d.tolist()), 0.0, 0.0, mean_norm=float(rng.uniform(0.3, 1))))
        active = topics[int(rng.integers(count))].topic_id
        state = TopicsState("c", tuple(topics), active_topic_id=active)
        unit = np.asarray(topics[0].centroid) if trial % 3 == 0 else rng.normal(size=16)
        unit = unit / np.linalg.norm(unit)
        background = None
        if centred:  # sometimes a topic's mean vector is the background itself (a zero rest)
            background = (np.asarray(topics[-1].centroid) * topics[-1].mean_norm if trial % 4 == 0
                          else rng.normal(size=16) * 0.2)
        for bonus in (0.0, 0.05):
            got, similarity = best_match(state, unit, bonus, background)
            want, want_similarity = _reference_best_match(state, unit, bonus, background)
            assert (got.topic_id, similarity) == (want.topic_id, want_similarity)

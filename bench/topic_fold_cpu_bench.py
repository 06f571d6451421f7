"""CPU of the topic fold's own per-message work, without Kafka or PostgreSQL (docs/topics.md,
"Throughput of the fold"): what the topics slice of the conversation processor (streams/processor.py, streams/topics_memory/slice.py) does per input — decode the
event, take the decoded state (codec.DecodedCache), `handle`, encode the outgoing events, write
the state back through the changelog codec — on interleaved conversations with 384-dimension
vectors, compactions answered at once (so topics stay at their real size, <= 12 active messages).

    python -m bench.topic_fold_cpu_bench [--conversations 30] [--turns 200] [--subjects 8] [--repeat 3] [--profile]
                                         [--requests]

By default each user message's vector is handed to the fold as the processor's `prepare` and the
batch replay hand it (`stage.embedded_of` of the raw vector: no embedding request/answer pair);
`--requests` takes the older path through `topic.embedding_requested` / `topic.message_embedded`.
Reports CPU-ms per message (of which `handle_ms` in the fold's shell and `dumps_ms` in the
changelog codec; the rest is decoding and encoding the events, as the processor does) (user and assistant; the embedding answers, if any, and compactions
are the fold's inputs too and are counted in), the changelog bytes written per message and the topic
event bytes per message. The machine may be shared: say its load."""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from datetime import UTC, datetime

import numpy as np

from bench.common import machine
from core.settings import Settings
from schemas import topic_events as te
from schemas.codec import decode, encode, new_event
from schemas.envelope import conversation_key
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.topics_memory import codec
from streams.topics_memory.agent import AgentConfig, handle, wants_embedding
from streams.topics_memory.stage import embedded_of

T0 = 1_750_000_000.0
USER_TEXT = "How do I plan the next step of this, given what we said before? " * 4
REPLY_TEXT = "Here is a longer answer that walks through the options one by one. " * 12


def message(conversation: str, seq: int, role: str, text: str) -> bytes:
    return encode(new_event(MESSAGE_APPENDED, MessageAppended(role=role, content=text), tenant_id="t",
                            conversation_id=conversation, user_id="u", seq=seq,
                            occurred_at=datetime.fromtimestamp(T0 + seq * 30, UTC)))


def answer(request, vector) -> bytes | None:
    """What the embedding and compaction stages would send back at once."""
    e, p = request.envelope, request.payload
    if request.type == te.TOPIC_EMBEDDING_REQUESTED:
        payload = te.TopicMessageEmbedded(seq=p.seq, attempt=p.attempt, embedding=vector, model="stub")
        return encode(new_event(te.TOPIC_MESSAGE_EMBEDDED, payload, tenant_id=e.tenant_id,
                                conversation_id=e.conversation_id, user_id="system", seq=p.seq))
    if request.type == te.TOPIC_COMPACTION_REQUESTED:
        payload = te.TopicCompacted(topic_id=p.topic_id, upto_seq=p.upto_seq, archived_seqs=p.seqs,
                                    summary="A summary of the topic so far. " * 30, attempt=p.attempt,
                                    prompt_version=p.prompt_version, model=p.model, generation_time_ms=1)
        return encode(new_event(te.TOPIC_COMPACTED, payload, tenant_id=e.tenant_id,
                                conversation_id=e.conversation_id, user_id="system", seq=e.seq))
    return None


def run(conversations: int, turns: int, subjects: int, requests: bool = False) -> dict:
    config = AgentConfig.from_settings(Settings(), model="stub", prompt_version="topic-summary-v1")
    rng = np.random.default_rng(4)
    centres = [rng.normal(size=384) for _ in range(subjects)]
    vectors = {}

    def vector(conversation: int, turn: int) -> list[float]:
        v = centres[(conversation + turn // 6) % subjects] + rng.normal(size=384) * 0.9
        return (v / np.linalg.norm(v)).tolist()

    inputs = []
    for turn in range(turns):
        for c in range(conversations):
            name = f"conv-{c}"
            inputs.append(message(name, 2 * turn, "user", USER_TEXT))
            inputs.append(message(name, 2 * turn + 1, "assistant", REPLY_TEXT))
            vectors[(name, 2 * turn)] = vector(c, turn)
    table: dict[bytes, bytes] = {}
    decoded = codec.DecodedCache(capacity=4096)
    changelog = events = handled = 0
    in_handle = in_dumps = 0.0
    cpu = time.process_time()
    pending = list(reversed(inputs))
    while pending:
        raw = pending.pop()
        event = decode(raw)
        handled += 1
        key = conversation_key(event.envelope.tenant_id, event.envelope.conversation_id)
        raw_state = table.get(key)
        state = decoded.get(key, raw_state, event.envelope.conversation_id)
        embedded = None
        if not requests and wants_embedding(state, event):
            embedded = embedded_of(np.asarray(vectors[(event.envelope.conversation_id, event.envelope.seq)]))
        started = time.process_time()
        new_state, outgoing = handle(config, state, event, time.time(), embedded)
        in_handle += time.process_time() - started
        replies = []
        for envelope in outgoing:
            value = encode(envelope)
            events += len(value)
            if envelope.type in (te.TOPIC_EMBEDDING_REQUESTED, te.TOPIC_COMPACTION_REQUESTED):
                request = decode(value)
                reply = answer(request, vectors.get((request.envelope.conversation_id, getattr(request.payload, "seq", -1))))
                replies.append(reply)
        pending.extend(reversed(replies))  # answered next, before the following message
        if new_state != state:
            started = time.process_time()
            value = codec.dumps(new_state, key)
            in_dumps += time.process_time() - started
            changelog += len(value)
            table[key] = value
            decoded.put(key, value, new_state)
    cpu = time.process_time() - cpu
    messages = len(inputs)
    sizes = sorted(len(v) for v in table.values())
    return {"messages": messages, "inputs": handled, "cpu_ms_per_message": round(cpu * 1000 / messages, 3),
            "handle_ms": round(in_handle * 1000 / messages, 3), "dumps_ms": round(in_dumps * 1000 / messages, 3),
            "changelog_bytes_per_message": round(changelog / messages),
            "event_bytes_per_message": round(events / messages), "largest_state_bytes": sizes[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=30)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--subjects", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the one with the least CPU is reported")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--requests", action="store_true", help="vectors through the log's request/answer pair")
    args = parser.parse_args()
    print(machine())
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
    runs = [run(args.conversations, args.turns, args.subjects, args.requests) for _ in range(args.repeat)]
    print(min(runs, key=lambda r: r["cpu_ms_per_message"]) | {"all_cpu_ms_per_message": [r["cpu_ms_per_message"] for r in runs]})
    if args.profile:
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()

"""The topic slice's embeddings in the processor: one message at a time, or a batch warmed first.

    python -m bench.embedding_queue_bench --workload locomo --messages 1500
    python -m bench.embedding_queue_bench --workload locomo --messages 600 --models stub
    python -m bench.embedding_queue_bench --workload locomo --messages 300 --integer-matmul --threads 2

The processor folds a conversation's records in log order; the topic fold needs each user
message's vector. Two ways, run in one process, alternating (`--rounds` of each), each round on
texts salted afresh (so the embedding cache starts cold for it), through the same embedder a
worker builds (`make_embedder`: the process's one embedding queue and the PostgreSQL embedding
cache of MEMORY_POSTGRES__DSN):

* `one-by-one`: each user message's `prepare` embeds it when the fold reaches it (main before
  the batched processor: one cache statement and one queue request a user message);
* `batched`: the processor takes BATCH_RECORDS records at once and the slice's `warm` embeds
  the batch's user messages in one call before the fold takes them one by one (streams/processor.py).

Reported per way: process CPU-ms per message (the fold, the embedder's calls, the cache's
statements and the model thread: everything of this process), the model thread's CPU-ms per
text and texts per model batch (the queue's own counters), embedding-cache lookups (SELECTs)
and texts looked up per message; and once, the model alone on the same texts (sorted by length,
batches of 32, the calling thread: what a text costs at best). The erasure check (`admit`) and
the state codec are left out: the same in both ways. No Kafka: the fold's inputs are built in
process, and no message index projector embeds the same texts beside it (in a worker its
requests join the queue's batches too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from datetime import UTC

from bench.burst_workload import WORKLOADS, burst
from bench.common import machine, report
from core.embeddings import make_embedder
from core.embeddings.cache import EmbeddingStore
from core.embeddings.local_onnx import auto_threads
from core.metrics import EMBEDDING_CACHE, EMBEDDING_QUEUE_BATCHES, EMBEDDING_QUEUE_CPU, EMBEDDING_QUEUE_TEXTS
from core.settings import EmbeddingSettings, Settings, get_settings
from projections.migrate import migrate
from schemas.codec import decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.context import StreamContext
from streams.processor import BATCH_RECORDS
from streams.topics_memory.slice import make_slice


STATEMENTS = [0]  # the embedding cache's lookups (one SELECT each), counted by `counted` below


def counted(get_many):
    async def get(self, *args, **kwargs):
        STATEMENTS[0] += 1
        return await get_many(self, *args, **kwargs)
    return get


EmbeddingStore.get_many = counted(EmbeddingStore.get_many)


def counters() -> dict[str, float]:
    return {"statements": STATEMENTS[0], "queue_cpu_s": EMBEDDING_QUEUE_CPU._value.get(), "queue_texts": EMBEDDING_QUEUE_TEXTS._value.get(),
            "queue_batches": EMBEDDING_QUEUE_BATCHES._value.get(),
            "lookups": sum(EMBEDDING_CACHE.labels(k)._value.get() for k in ("hit", "miss", "error"))}


def events(workload: str, messages: int, salt: str) -> list[tuple[bytes, object]]:
    out = []
    for m in burst(workload, messages, salt):
        envelope = new_event(MESSAGE_APPENDED, MessageAppended(role=m.role, content=m.content), tenant_id="bench",
                             conversation_id=m.conversation_id, user_id=m.conversation_id, seq=m.seq,
                             occurred_at=m.occurred_at.astimezone(UTC))
        key = f"bench/{m.conversation_id}".encode()
        out.append((key, decode(encode(envelope), key=key)))
    return out


async def fold_all(part, batch: list[tuple[bytes, object]], states: dict, *, warm: bool) -> None:
    """As the processor does for one batch of records: (warm), then prepare + fold each in order."""
    if warm:
        await part.warm([(key, states.setdefault(key, part.load(key, None)), event) for key, event in batch])
    now = time.time()
    for key, event in batch:
        state = states.setdefault(key, part.load(key, None))
        inputs = await part.prepare(state, event)
        states[key], _ = part.fold(state, event, now, inputs)


async def one_round(settings: Settings, args, way: str) -> dict:
    rows = events(args.workload, args.messages, f" [{uuid.uuid4().hex[:8]}]")  # cold cache for this round
    ctx = StreamContext(settings, conversation_events=None, memory_events=None, conversation_and_memory_events=None)
    part = make_slice(ctx)
    step = BATCH_RECORDS if way == "batched" else 1
    before, cpu, clock = counters(), time.process_time(), time.perf_counter()
    states: dict = {}
    for at in range(0, len(rows), step):
        await fold_all(part, rows[at:at + step], states, warm=way == "batched")
    cpu, seconds, after = time.process_time() - cpu, time.perf_counter() - clock, counters()
    done = {k: after[k] - before[k] for k in after}
    users = sum(1 for _, e in rows if e.payload.role == "user")
    return {
        "way": way, "messages": len(rows), "user_messages": users, "seconds": round(seconds, 1),
        "process_cpu_ms_per_message": round(1000 * cpu / len(rows), 2),
        "model_cpu_ms_per_text": round(1000 * done["queue_cpu_s"] / max(1, done["queue_texts"]), 2),
        "texts_per_model_batch": round(done["queue_texts"] / max(1, done["queue_batches"]), 1),
        "cache_lookups_per_message": round(done["statements"] / len(rows), 3),
        "cache_texts_per_message": round(done["lookups"] / len(rows), 3),
    }


async def model_alone(embedder, args) -> dict:
    """The model on the user texts of a round, sorted by length, in batches of 32, this thread."""
    provider = getattr(embedder, "provider", None) or getattr(embedder.inner, "provider", None)
    texts = sorted((provider.prefixes.document + e.payload.content for _, e in
                    events(args.workload, args.messages, f" [{uuid.uuid4().hex[:8]}]") if e.payload.role == "user"),
                   key=len)
    provider.embed_sync(texts[:8])  # loaded and warm
    cpu = time.thread_time()
    for at in range(0, len(texts), 32):
        provider.embed_sync(texts[at:at + 32])
    return {"texts": len(texts), "model_alone_cpu_ms_per_text": round(1000 * (time.thread_time() - cpu) / len(texts), 2)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=WORKLOADS[1:], default="locomo")
    parser.add_argument("--messages", type=int, default=1500)
    parser.add_argument("--models", choices=["offline", "stub"], default="offline")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each way, alternating")
    parser.add_argument("--integer-matmul", action=argparse.BooleanOptionalAction,
                        default=EmbeddingSettings().integer_matmul,
                        help="the local model's weights as int8 integer products (embedding.integer_matmul) or, with"
                             " --no-integer-matmul, as float32 products; default: the setting's default (float)")
    parser.add_argument("--threads", type=int, default=0,
                        help="the model's intra-op threads (embedding.intra_op_threads; 0: auto, half the cores). With"
                             " more than one, the model thread's CPU leaves the pool threads' out: read the process's")
    args = parser.parse_args()
    base = get_settings()
    settings = Settings(environment="test", postgres=base.postgres, kafka=base.kafka,
                        embedding=EmbeddingSettings(provider="local" if args.models == "offline" else "stub",
                                                    integer_matmul=args.integer_matmul, intra_op_threads=args.threads),
                        systems=["topics"])
    await asyncio.to_thread(migrate, settings)  # public.embedding_cache
    print(f"machine: {machine()}", flush=True)
    embedder = make_embedder(settings)  # held open: every round uses the one model and queue, loaded
    results = {"integer_matmul": args.integer_matmul, "threads": args.threads or auto_threads(), "alone": await model_alone(embedder, args), "rounds": []}
    for _ in range(args.rounds):
        for way in ("one-by-one", "batched"):
            results["rounds"].append(await one_round(settings, args, way))
            print(json.dumps(results["rounds"][-1]), flush=True)
    report("the topic slice's embeddings: one by one vs a batch warmed first", results)
    await embedder.aclose()


if __name__ == "__main__":
    asyncio.run(main())

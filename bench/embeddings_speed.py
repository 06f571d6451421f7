"""Sentences per second of the local all-MiniLM-L6-v2 ONNX embedder on this machine.

    python -m bench.embeddings_speed [--sentences 2000] [--batch-size 32] [--threads 0]
    python -m bench.embeddings_speed --texts locomo --sentences 5882 --threads 1   # the burst's texts
    python -m bench.embeddings_speed --texts locomo --sentences 1500 --callers 3 --threads 1
        # + 3 concurrent callers (as the worker's consumers): each with its own model (as before the
        #   embedding queue) vs all through one queue; CPU per text of each beside the model alone
(from the repo root; `python bench/embeddings_speed.py` works too)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file, not installed

from bench.burst_workload import burst  # noqa: E402
from core.embeddings import LocalOnnxEmbedder  # noqa: E402
from core.embeddings.queue import EmbeddingQueue  # noqa: E402

_WORDS = (
    "the user asked about router firmware wifi channel evening drops cat named miso shy "
    "quiet room apple pie recipe grandmother weekend trip lyon train tickets budget "
    "meeting tomorrow project deadline python error stack trace database migration "
    "postgres kafka topic summary memory window message assistant suggested update"
).split()


def sentences(n: int, seed: int = 0) -> list[str]:
    """Conversation-like sentences of 8-30 words (deterministic)."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(_WORDS, k=rng.randint(8, 30))).capitalize() + "." for _ in range(n)]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = auto (half the cores)")
    parser.add_argument("--callers", type=int, default=0,
                        help="also: this many concurrent callers, each with its own model vs one shared queue")
    parser.add_argument("--request-size", type=int, default=8, help="texts per request of a caller")
    parser.add_argument("--caller-threads", type=int, default=2,
                        help="intra-op threads of each caller's own model (2: onnxruntime's default here before)")
    parser.add_argument("--texts", choices=["words", "longconv", "locomo"], default="words",
                        help="words: random sentences of 8-30 words; longconv / locomo: the messages of "
                             "bench/burst_workload.py (what system_bench --workload feeds the worker)")
    args = parser.parse_args()
    embedder = LocalOnnxEmbedder(batch_size=args.batch_size, intra_op_threads=args.threads)
    await embedder.embed_documents(sentences(64, seed=1))  # load + warm up
    texts = sentences(args.sentences) if args.texts == "words" else \
        [m.content for m in burst(args.texts, args.sentences)]
    started, cpu_started = time.perf_counter(), time.process_time()
    vectors = await embedder.embed_documents(texts)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    single = sentences(100, seed=2)
    started = time.perf_counter()
    for text in single:
        await embedder.embed_query(text)
    one_ms = (time.perf_counter() - started) / len(single) * 1000
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"batch={args.batch_size} threads={args.threads or 'default'}: "
          f"{len(texts)} sentences in {elapsed:.2f}s = {len(texts) / elapsed:.0f} sentences/s "
          f"(shape {vectors.shape})")
    # CPU seconds hardly depend on other load: on a shared box they say what an idle
    # machine would do (sentences per CPU-second x cores, if the threads scale).
    print(f"cpu time {cpu:.2f}s = {len(texts) / cpu:.0f} sentences per CPU-second = "
          f"{1000 * cpu / len(texts):.2f} CPU-ms per text ({args.texts}, mean "
          f"{sum(map(len, texts)) / len(texts):.0f} characters); "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"one query at a time: {one_ms:.1f} ms each")
    if args.callers:
        await concurrent_callers(args, texts)


async def concurrent_callers(args, texts: list[str]) -> None:
    """The texts split over `callers` concurrent callers sending `request_size` texts at a time:
    each caller with a model of its own (a worker before the embedding queue: one ONNX session per
    consumer, `--caller-threads` each) vs every caller through one queue (one session, `--threads`)."""
    parts = [texts[i::args.callers] for i in range(args.callers)]

    async def caller(embed, part):
        for start in range(0, len(part), args.request_size):
            await embed(part[start:start + args.request_size])

    own = [LocalOnnxEmbedder(batch_size=args.batch_size, intra_op_threads=args.caller_threads) for _ in parts]
    for model in own:
        model.embed_sync(sentences(8, seed=3))  # load + warm up
    shared = LocalOnnxEmbedder(batch_size=args.batch_size, intra_op_threads=args.threads)
    queue = EmbeddingQueue(shared.embed_sync, shared.dimensions, batch_size=args.batch_size)
    await queue.embed(sentences(8, seed=3))
    for name, embed_for in (("own model per caller", lambda i: own[i].embed_documents),
                            ("one shared queue", lambda i: queue.embed)):
        started, cpu_started = time.perf_counter(), time.process_time()
        await asyncio.gather(*(caller(embed_for(i), part) for i, part in enumerate(parts)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        print(f"{args.callers} callers x requests of {args.request_size}, {name}: "
              f"{1000 * cpu / len(texts):.2f} CPU-ms per text, {len(texts) / elapsed:.0f} texts/s; "
              f"load average {os.getloadavg()[0]:.2f}")
    await queue.aclose()


if __name__ == "__main__":
    asyncio.run(main())

"""Sentences per second of the local all-MiniLM-L6-v2 ONNX embedder on this machine.

    python -m bench.embeddings_speed [--sentences 2000] [--batch-size 32] [--threads 0]
    python -m bench.embeddings_speed --texts locomo --sentences 5882 --threads 1   # the burst's texts
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
    parser.add_argument("--threads", type=int, default=0, help="0 = onnxruntime default")
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


if __name__ == "__main__":
    asyncio.run(main())

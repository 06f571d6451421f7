"""What one short question's embedding costs, part by part, against the model's own floor.

    python -m bench.query_embedding_bench --queries 200 --rounds 3

All in one process, the ways alternated round by round (so a loaded machine weighs on each alike),
the same four questions over and over (nothing here caches), one question at a time as a single
client asks them; per way the wall time and the process CPU per question:

* `model floor`: ONNX Runtime's `session.run` alone on one question tokenized once (what the
  model costs at best for a ~12-token input);
* `tokenizer`: the tokenizer alone on the question;
* `embed_sync`: LocalOnnxEmbedder's blocking call (tokenize, run, pool, normalise) on the
  calling thread;
* `queue, lingering`: through the process's embedding queue as a document is (a request the idle
  model thread lingers `--linger-ms` for, hoping for company), one thread hop each way;
* `queue, urgent`: through the queue as the context endpoint's query is (`embed_query`: an idle
  model runs it at once);
* `integer floor` and `integer embed_sync`: the same two with the weights run as int8 integer
  products (`retrieval.query_integer_matmul`, core/embeddings/integer_graph.py: activations
  quantized per row); and once, the cosine of each question's integer vector to its float one;
* `per-tensor floor` and `per-tensor embed_sync`: the first integer graph (activations quantized
  per tensor, `integer_matmul_model(per_tensor=True)`, no longer used: a text's vector depended on
  its batch), for comparison; its cosines too, and for both integer graphs the largest difference
  between a question's vector alone and in one batch with a longer and a shorter text.

With `--threads` the ONNX session's intra-op threads (the API's query embedder uses
`retrieval.query_embedding_threads`, 1). The process's CPU includes every thread (ONNX's pool too).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import machine, report
from core.embeddings.integer_graph import integer_matmul_model
from core.embeddings.local_onnx import LocalOnnxEmbedder, default_model_path
from core.embeddings.queue import EmbeddingQueue

QUESTIONS = ("Which port was the database configured on again?", "Does Caroline have a pet?",
             "What did Ana say about her new job in Lisbon?", "When is the team offsite planned?")


async def measure(args: argparse.Namespace) -> dict:
    model = LocalOnnxEmbedder(intra_op_threads=args.threads)
    model.embed_sync(["warm up"])
    queue = EmbeddingQueue(model.embed_sync, model.dimensions, linger_s=args.linger_ms / 1000)
    await queue.embed(["warm up"])
    integer = LocalOnnxEmbedder(intra_op_threads=args.threads, integer_matmul=True)
    integer.embed_sync(["warm up"])
    per_tensor_path = Path(tempfile.mkdtemp()) / "per-tensor.onnx"
    per_tensor_path.write_bytes(integer_matmul_model(default_model_path(), per_tensor=True))
    per_tensor = LocalOnnxEmbedder(intra_op_threads=args.threads, model_path=per_tensor_path)
    per_tensor.embed_sync(["warm up"])
    tokenizer, session = model._tokenizer, model._session
    tokens = {text: np.array([tokenizer.encode(text).ids], dtype=np.int64) for text in QUESTIONS}
    feeds = {text: {name: value for name, value in {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                                    "token_type_ids": np.zeros_like(ids)}.items()
                    if name in model._input_names} for text, ids in tokens.items()}

    async def floor(text: str) -> None:
        session.run(["last_hidden_state"], feeds[text])

    async def integer_floor(text: str) -> None:
        integer._session.run(["last_hidden_state"], feeds[text])

    async def integer_direct(text: str) -> None:
        integer.embed_sync([text])

    async def per_tensor_floor(text: str) -> None:
        per_tensor._session.run(["last_hidden_state"], feeds[text])

    async def per_tensor_direct(text: str) -> None:
        per_tensor.embed_sync([text])

    async def tokenize(text: str) -> None:
        tokenizer.encode_batch([text])

    async def direct(text: str) -> None:
        model.embed_sync([text])

    async def lingering(text: str) -> None:
        await queue.embed([text])

    async def urgent(text: str) -> None:
        await queue.embed([text], urgent=True)

    ways = {"model floor": floor, "tokenizer": tokenize, "embed_sync": direct, "queue, lingering": lingering,
            "queue, urgent": urgent, "integer floor": integer_floor, "integer embed_sync": integer_direct,
            "per-tensor floor": per_tensor_floor, "per-tensor embed_sync": per_tensor_direct}
    per: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for round_ in range(args.rounds):
        for name, way in ways.items():
            texts = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.queries)]
            wall, cpu = time.perf_counter(), time.process_time()
            for text in texts:
                await way(text)
            per[name].append(((time.perf_counter() - wall) / len(texts) * 1e3,
                              (time.process_time() - cpu) / len(texts) * 1e3))
    # Same vectors whichever way: the queue hands back the rows the model made.
    same = [float(np.abs(model.embed_sync([q])[0] - (await queue.embed([q], urgent=True))[0]).max())
            for q in QUESTIONS]
    await queue.aclose()
    floats = model.embed_sync(list(QUESTIONS))
    floor_cpu = float(np.mean([c for _, c in per["model floor"]]))
    return {
        "machine": machine(), "load_average": os.getloadavg(), "threads": args.threads, "linger_ms": args.linger_ms,
        "tokens": [int(ids.shape[1]) for ids in tokens.values()], "queries_per_round": args.queries, "rounds": args.rounds,
        "ways": {name: {"wall_ms": [round(w, 3) for w, _ in v], "cpu_ms": [round(c, 3) for _, c in v],
                        "cpu_ms_mean": round(float(np.mean([c for _, c in v])), 3),
                        "wall_ms_mean": round(float(np.mean([w for w, _ in v])), 3),
                        "cpu_vs_floor": round(float(np.mean([c for _, c in v])) / floor_cpu, 3)}
                 for name, v in per.items()},
        "max_abs_difference_queue_vs_direct": max(same),
        "cosine_integer_vs_float": [round(float(a @ b), 5) for a, b in zip(floats, integer.embed_sync(list(QUESTIONS)))],
        "cosine_per_tensor_vs_float": [round(float(a @ b), 5)
                                       for a, b in zip(floats, per_tensor.embed_sync(list(QUESTIONS)))],
        "max_abs_difference_alone_vs_batched": {name: batch_dependence(graph) for name, graph in
                                                (("integer", integer), ("per-tensor", per_tensor), ("float", model))},
    }


def batch_dependence(model: LocalOnnxEmbedder) -> float:
    """The largest difference of a question's vector alone and in one batch (padded to the longest)
    with a longer text and a shorter one: 0 when a row depends on nothing but its text."""
    longer = "Which port was the database configured on again, after the router's network issue? " * 4
    return max(float(np.abs(model.embed_sync([q])[0] - model.embed_sync([longer, q, "apple pie"])[1]).max())
               for q in QUESTIONS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=200, help="questions per way per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="ONNX intra-op threads")
    parser.add_argument("--linger-ms", type=float, default=2.0, help="the queue's linger (the setting's default)")
    args = parser.parse_args()
    report("query embedding", asyncio.run(measure(args)))


if __name__ == "__main__":
    main()

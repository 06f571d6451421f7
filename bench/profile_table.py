"""Where an API process's samples went, by part of a turn-start context: py-spy's raw (folded)
output read into the table docs/retrieval.md gives ("Ninth round").

    py-spy record --pid API --rate 200 --format raw -o /tmp/api.folded   # or bench/locomo.py --py-spy
    python bench/profile_table.py /tmp/api.folded

Each sample is counted once, under the first part (in the order below) one of whose markers is
a frame of its stack: the question's embedding runs on the embedder's thread, the served
record in a task of its own, the rest inside the context route. Pure: no project imports.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("question embedding (ONNX, its thread)", ("onnxruntime", "embed_sync", "EmbeddingQueue", "InferenceSession")),
    ("/healthz", ("healthz (api/routes/health.py",)),
    ("served-context record (event, Kafka)", ("api/served.py", "aiokafka")),
    ("first reads (memory, gap, prepare, topic progress)", ("read_turn (api/turn_context.py",)),
    ("search statement: psycopg, rows", ("search_items (retrieval/items.py", "rows_with_coverage")),
    ("surfaced record (statement)", ("record_surfaced",)),
    ("ranking (pairs, candidates, scores)", ("pair_replies", "to_candidates", "score_candidates", "continue_best",
                                            "message_text")),
    ("packing (lines, tokens)", ("pack (retrieval/packing.py",)),
    ("retrieved section out (pydantic, excluded tokens)", ("to_out (api/sections/retrieval.py",)),
    ("retrieval, other", ("retrieve (retrieval/service.py", "retrieval_section")),
    ("topic section", ("topic_section",)),
    ("context, other (assembly, ContextOut)", ("build_turn_context_clocked",)),
    ("route, other (wait, conversation row)", ("turn_context (api/routes/context.py",)),
    ("response: validation, serialization", ("serialize_response", "jsonable_encoder", "JSONResponse")),
    ("parameters, dependencies, auth (FastAPI)", ("solve_dependencies", "request_params_to_args")),
    ("routing (FastAPI route matching)", ("_IncludedRouter._match", "APIRouter.matches", "Route.matches")),
    ("socket writes, reads (uvicorn)", ("RequestResponseCycle.send", "HttpToolsProtocol.data_received")),
    ("psycopg, other (pool)", ("psycopg",)),
    ("framework, other (uvicorn, starlette, middleware, event loop)", ("uvicorn", "starlette", "fastapi", "asyncio")),
]


def table(lines) -> tuple[Counter, int]:
    """(samples per part, all samples) of py-spy's raw lines: `frame;frame;... count`."""
    parts: Counter = Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        name = next((name for name, markers in PARTS if any(marker in stack for marker in markers)), "other")
        parts[name] += int(count)
    return parts, total


def render(parts: Counter, total: int) -> str:
    rows = [f"| {name} | {100 * n / max(total, 1):.1f} % |" for name, n in parts.most_common()]
    return "\n".join(["| part | share of the API process's samples |", "| --- | --- |", *rows,
                      f"| (samples) | {total} |"])


def main() -> None:
    parts, total = table(Path(sys.argv[1]).read_text().splitlines())
    print(render(parts, total))


if __name__ == "__main__":
    main()

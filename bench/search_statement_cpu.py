"""The context's search statement alone: captured from a kept bench/locomo.py generation's contexts
built in process by one tree, then replayed, two trees' statements alternated on one connection,
each statement's backend CPU read from /proc (docs/retrieval.md, "Eleventh round, PostgreSQL").

    (cd /tmp/main && PYTHONPATH=$PWD python /path/to/bench/search_statement_cpu.py capture bba0cd859 \
        --out /tmp/main.json)
    PYTHONPATH=$PWD python bench/search_statement_cpu.py capture bba0cd859 --out /tmp/branch.json
    python bench/search_statement_cpu.py replay /tmp/main.json /tmp/branch.json --rounds 3

(from the tree's root, its own stack up: PostgreSQL on this machine; `MEMORY_LOCOMO_DEV` as for
bench/locomo.py.) `replay` also counts, for each file after the first, the statements that return
the same rows as the first file's (`same_rows`: every column; arrays compared as sets, the lexeme
arrays' order is the tsvector's). Each statement's CPU is the backend's clock ticks (10 ms) over a
file's statements, so a file should hold a few hundred (`capture --all`: every question).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, os.getcwd())  # the capturing tree (run from its root)
sys.path.insert(0, str(HERE))


def backend_cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def capture(args) -> None:
    import locomo_data as data
    from api.turn_context import build_turn_context
    from locomo_read_cpu import read_state
    from projections import queries
    from retrieval.request import ContextRequest

    captured: list[str] = []
    bound: list[list] = []  # the statement and its parameters as the API's process sent them

    class Capturing(psycopg.AsyncCursor):
        async def execute(self, query, params=None, **kwargs):  # type: ignore[override]
            text = query.decode() if isinstance(query, bytes) else str(query)
            if "surfaced_seqs" in text and "memory_items t" in text:
                literal = psycopg.AsyncClientCursor(self.connection).mogrify(text, params) if params else text
                captured.append(literal.removesuffix("; COMMIT"))
                bound.append([text, {k: (v.isoformat() if isinstance(v, datetime) else v)
                                     for k, v in (params or {}).items()}, params is not None])
            return await super().execute(query, params, **kwargs)

    state = await read_state(args.generation)
    settings = state.settings
    questions = [(c, q) for c in data.load(args.data) for q in c.questions]
    picks = questions if args.all else [random.Random(args.seed).choice(questions) for _ in range(args.questions)]
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, cursor_factory=Capturing,
                                                     options=f"-c search_path={settings.pg_schema},public") as conn:
        for conv, question in picks:
            conversation = await queries.get_conversation(conn, "ctxq", conv.conversation_id)
            await conn.rollback()
            request = ContextRequest(conversation=conversation, user_id=conversation.user_id,
                                     subject_id=conversation.subject_id, query=question.question,
                                     before_seq=conv.end_seq, budget_tokens=500, now=datetime.now(UTC))
            await build_turn_context(conn, request, min_seq=None, app_state=state)
            await conn.rollback()
    args.out.write_text(json.dumps({"code": os.getcwd(), "schema": settings.pg_schema, "statements": captured,
                                          "bound": bound}))
    print(json.dumps({"captured": len(captured), "out": str(args.out)}))


def canonical(rows) -> list:
    return [tuple(tuple(sorted(map(repr, v))) if isinstance(v, list) else v for v in row) for row in rows]


async def replay(args) -> None:
    from core.settings import get_settings

    files = [json.loads(p.read_text()) for p in args.files]
    dsn = get_settings().postgres.dsn
    async with await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, options=f"-c search_path={files[0]['schema']},public") as conn:
        pid = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
        results: dict[str, list[float]] = {str(p): [] for p in args.files}
        first_rows: list = []
        for round_ in range(args.rounds + 1):  # the first round warms up, unmeasured
            for path, f in zip(args.files, files):
                rows_of = []
                before = backend_cpu_ms(pid)
                for n, sql in enumerate(f["statements"]):
                    text, params, has = f["bound"][n] if args.bound else (sql, None, False)
                    # --bound: as sent (server-side parameters when it had them: build_turn_context
                    # without end_reads, bench/locomo_read_cpu.py); else the literal text, as the
                    # served context sends it (one simple query with its COMMIT).
                    cur = await (conn.execute(text, params, prepare=False) if has else conn.execute(sql.encode()))
                    rows_of.append(canonical(await cur.fetchall()))
                spent = backend_cpu_ms(pid) - before
                if round_:
                    results[str(path)].append(round(spent / len(f["statements"]), 2))
                else:
                    first_rows.append(rows_of)
    same = [sum(1 for a, b in zip(first_rows[0], other) if a == b) for other in first_rows[1:]]
    print(json.dumps({"cpu_ms_per_statement": results, "statements": [len(f["statements"]) for f in files],
                      "same_rows": same, "load_average": [round(x, 2) for x in os.getloadavg()]}, default=str))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("capture")
    c.add_argument("generation")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--questions", type=int, default=30)
    c.add_argument("--all", action="store_true")
    c.add_argument("--seed", type=int, default=5)
    c.add_argument("--data", type=Path, default=None, help="the LoCoMo file (default: MEMORY_LOCOMO_DEV)")
    r = sub.add_parser("replay")
    r.add_argument("files", nargs="+", type=Path)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--bound", action="store_true", help="with the parameters bound by the server, as captured")
    args = parser.parse_args()
    asyncio.run(capture(args) if args.command == "capture" else replay(args))


if __name__ == "__main__":
    main()

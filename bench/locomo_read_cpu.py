"""A kept bench/locomo.py generation's contexts built in process, one at a time: the API's CPU
(this process) and PostgreSQL's (the connection's backend, from /proc) a context, by statement,
and optionally every context's retrieved and topic sections written out to compare two trees.

    PYTHONPATH=$PWD python bench/locomo_read_cpu.py b9677ae50 --questions 60
    PYTHONPATH=$PWD python bench/locomo_read_cpu.py b9677ae50 --all --dump /tmp/branch.json
    (cd /tmp/main && PYTHONPATH=$PWD python /path/to/bench/locomo_read_cpu.py b9677ae50 --all --dump /tmp/main.json)
    python bench/locomo_read_cpu.py --compare /tmp/main.json /tmp/branch.json

(from the measured tree's root, its own stack up: PostgreSQL on this machine, so the backend's CPU
can be read; `MEMORY_LOCOMO_DEV` as for bench/locomo.py, `--generated 2` for its generator set.)
Each question at its conversation's end, `budget_tokens` 500, as bench/locomo.py asks; the
questions are asked twice and the second pass measured (the question vectors cached, as a served
question asked again). docs/retrieval.md, "Tenth round".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, os.getcwd())  # the measured tree (run from its root)
sys.path.insert(0, str(HERE))

import locomo_data as data  # noqa: E402
import longconv  # noqa: E402
from api.turn_context import build_turn_context  # noqa: E402
from core.settings import KafkaSettings, PostgresSettings, Settings, get_settings  # noqa: E402
from projections import queries  # noqa: E402
from retrieval.request import ContextRequest  # noqa: E402
from retrieval.service import warm_up  # noqa: E402

TENANT = "ctxq"  # bench/context_quality.py's


def backend_cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


class Timed(psycopg.AsyncCursor):
    """Each statement's backend CPU (the execute waits for its result), by its first words."""

    backend: int | None = None
    by_statement: dict[str, float] = {}

    async def execute(self, query, params=None, **kwargs):  # type: ignore[override]
        before = backend_cpu_ms(Timed.backend) if Timed.backend else 0.0
        try:
            return await super().execute(query, params, **kwargs)
        finally:
            if Timed.backend:
                text = query.decode() if isinstance(query, bytes) else str(query)
                name = " ".join(text.split())[:60]
                Timed.by_statement[name] = Timed.by_statement.get(name, 0.0) + backend_cpu_ms(Timed.backend) - before


def section(out) -> dict:
    r, topic = out.retrieved, out.active_topic
    return {"items": [[i.kind, i.id, i.tokens, i.line, round(i.score.final, 9)] for i in r.items],
            "excluded": [[e.kind, e.id, e.reason, e.tokens] for e in r.excluded], "candidates": r.candidates,
            "excluded_total": r.excluded_total, "tokens_used": r.tokens_used,
            "topic": getattr(topic, "topic_id", None),
            "restored": [m.seq for m in getattr(topic, "restored_messages", [])],
            "topic_section": None if topic is None else topic.model_dump(mode="json", exclude={"stats"})}


async def read_state(generation: str) -> SimpleNamespace:
    """An app state for reading `generation` in process (settings from the environment's
    stack), warmed up as the API warms its own (also bench/search_statement_cpu.py's)."""
    base = get_settings()
    settings = Settings(environment="test", generation=generation,
                        postgres=PostgresSettings(dsn=base.postgres.dsn),
                        kafka=KafkaSettings(bootstrap_servers=base.kafka.bootstrap_servers, topic_prefix="unused"))
    state = SimpleNamespace(settings=settings)
    await warm_up(state)
    return state


async def run(args) -> dict:
    state = await read_state(args.generation)
    settings = state.settings
    conversations = (longconv.generate(1, args.generated, sessions=(15, 18), turns=(14, 22)) if args.generated
                     else data.load(args.data))
    questions = [(c, q) for c in conversations for q in c.questions]
    picks = questions if args.all else [random.Random(args.seed).choice(questions) for _ in range(args.questions)]
    dump: dict = {}
    api_ms, pg_ms = [], []
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, cursor_factory=Timed,
                                                     options=f"-c search_path={settings.pg_schema},public") as conn:
        import api.app  # the API pool's per-connection set-up, if the measured tree has one
        configure = getattr(api.app, "utc_by_name", None)
        getattr(api.app, "cache_long_statements", lambda: None)()
        if configure is not None:
            await configure(conn)
        backend = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
        await conn.rollback()
        for measured in (False, True):
            Timed.backend, Timed.by_statement = (backend if measured else None), {}
            for conv, question in picks:
                conversation = await queries.get_conversation(conn, TENANT, conv.conversation_id)
                await conn.rollback()
                request = ContextRequest(conversation=conversation, user_id=conversation.user_id,
                                         subject_id=conversation.subject_id, query=question.question,
                                         before_seq=conv.end_seq, budget_tokens=500, now=datetime.now(UTC))
                api, pg = time.process_time(), backend_cpu_ms(backend)
                out = await build_turn_context(conn, request, min_seq=None, app_state=state)
                await conn.rollback()
                if measured:
                    api_ms.append((time.process_time() - api) * 1000)
                    pg_ms.append(backend_cpu_ms(backend) - pg)
                    dump[question.qid] = section(out)
    if args.dump:
        args.dump.write_text(json.dumps(dump))
    n = len(api_ms)
    return {"code": os.getcwd(), "generation": args.generation, "contexts": n,
            "api_cpu_ms_per_context": round(sum(api_ms) / n, 2), "postgres_cpu_ms_per_context": round(sum(pg_ms) / n, 2),
            "postgres_cpu_ms_by_statement": {k: round(v / n, 2) for k, v in
                                             sorted(Timed.by_statement.items(), key=lambda kv: -kv[1])},
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def compare(first: Path, second: Path) -> dict:
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    fields = next(iter(a.values())).keys()
    return {"contexts": len(a), "only_in_one": len(set(a) ^ set(b)),
            "differing": {f: sum(1 for q in a if q in b and a[q][f] != b[q][f]) for f in fields}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("generation", nargs="?")
    parser.add_argument("--questions", type=int, default=60)
    parser.add_argument("--all", action="store_true", help="every question of the set once (each asked twice)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--generated", type=int, default=0, help="bench/locomo.py --generated N's set")
    parser.add_argument("--data", type=Path, default=None, help="the LoCoMo file (default: MEMORY_LOCOMO_DEV)")
    parser.add_argument("--dump", type=Path, help="write each context's retrieved and topic sections here")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("FIRST", "SECOND"))
    args = parser.parse_args()
    if args.compare:
        print(json.dumps(compare(*args.compare), indent=2))
        return
    if not args.generation:
        parser.error("a kept generation (as bench/locomo.py --keep prints it: the part before ':')")
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()

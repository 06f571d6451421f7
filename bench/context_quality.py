"""Turn-start context quality on long dated two-person conversations (docs/evaluation.md).

    python bench/context_quality.py [--quick] [--conversations N] [--seed S] [--budget 500] [--keep]
                                    [--out FILE.json] [--settle-timeout S]

Generates conversations (bench/longconv.py), ingests them through the real stack (a worker
process and the API under uvicorn on Kafka + PostgreSQL, with a unique topic prefix and
generation), waits until memory has settled, then asks every question at the end of its
conversation through GET /v1/conversations/{id}/context?before_seq=<end>&query=<question>:
first-turn (the conversation's surfaced_items are deleted in PostgreSQL before each question)
and sequential (all of a conversation's questions one after another). Scores the share of
the answer's content words in `retrieved.text`, beside a BM25-over-messages baseline and the
extraction ceiling. Prints a markdown table and writes a JSON file.

It measures whatever code PYTHONPATH points at (child processes inherit it); its own files
are loaded from beside this script, so another checkout can be measured with this one:
    cd /work/wt/OTHER && PYTHONPATH=/work/wt/OTHER python /work/wt/ctx-eval/bench/context_quality.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import psycopg

HERE = Path(__file__).resolve().parent


def _load(name: str):
    """This script's sibling module, never a `bench.` module of the checkout under test."""
    spec = importlib.util.spec_from_file_location(f"ctx_eval_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


longconv = _load("longconv")
S = _load("ctx_scoring")
sys.modules["ctx_scoring"] = S  # what ctx_report imports when loaded by path
R = _load("ctx_report")
common = _load("common")  # settings/worker helpers; they import the code under test

TENANT = "ctxq"
API_KEY = "ctxq-key"


def measured_code() -> str:
    """Where the code under test comes from (the worker and API processes import the same)."""
    import memory_agent

    root = Path(memory_agent.__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head, dirty = "", ""
    return f"{root}" + (f" at {head}{' (uncommitted changes)' if dirty else ''}" if head else "")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_api(settings, port: int) -> subprocess.Popen:
    """The real app under uvicorn in its own process, configured like the worker."""
    env = common.child_env(settings, {"MEMORY_API__API_KEYS": json.dumps({API_KEY: TENANT})})
    code = ("import uvicorn; from api.app import create_app; from core.settings import Settings; "
            f"uvicorn.run(create_app(Settings()), host='127.0.0.1', port={port}, log_level='warning', "
            "access_log=False)")
    log = Path(f"/tmp/memory-agent-bench/{settings.generation}-api.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=out, stderr=subprocess.STDOUT)


async def ingest(settings, conversations) -> int:
    """Every message through the SDK's idempotent producer, occurred_at = the session time."""
    from runtime.client import MemoryClient

    sent = []
    async with MemoryClient(settings) as client:
        for conv in conversations:
            for m in conv.messages:
                sent.append(await client.enqueue(client.message_event(
                    tenant_id=TENANT, conversation_id=conv.conversation_id, user_id=user_of(conv), seq=m.seq,
                    role=m.role, content=m.content, occurred_at=m.occurred_at)))
        await asyncio.gather(*sent)
    return len(sent)


def user_of(conv) -> str:
    return getattr(conv, "user_id", None) or f"u-{conv.conversation_id}"


class Db:
    def __init__(self, settings) -> None:
        self.settings = settings
        self.conn: psycopg.AsyncConnection | None = None

    async def __aenter__(self) -> "Db":
        self.conn = await psycopg.AsyncConnection.connect(
            self.settings.postgres.dsn, autocommit=True, options=f"-c search_path={self.settings.pg_schema},public")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.conn.close()

    async def rows(self, sql: str, params=()) -> list[tuple]:
        try:
            return await (await self.conn.execute(sql, params)).fetchall()
        except psycopg.errors.UndefinedTable:  # a system the measured code does not have
            return []

    async def value(self, sql: str, params=()):
        rows = await self.rows(sql, params)
        return rows[0][0] if rows else None


COUNTS = {
    "messages": "SELECT count(*) FROM messages",
    "summaries_completed": "SELECT count(*) FROM memory WHERE status = 'completed'",
    "summaries_processing": "SELECT count(*) FROM memory WHERE status = 'processing'",
    "summaries_failed": "SELECT count(*) FROM memory WHERE status = 'failed'",
    "chunks": "SELECT count(*) FROM conversation_chunks",
    "facts": "SELECT count(*) FROM facts",
    "topics": "SELECT count(*) FROM topics",
    "topic_summaries": "SELECT count(*) FROM topics WHERE summary IS NOT NULL",
    "topic_messages": "SELECT count(*) FROM topic_messages",
    "topic_unassigned": "SELECT count(*) FROM topic_unassigned",
}


async def kafka_lag(settings) -> int | None:
    """Records of the conversation and memory topics that this run's consumer groups (agents,
    stages, projectors) have not committed yet; None if Kafka cannot tell."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    topics = {settings.kafka.conversation_topic, settings.kafka.memory_topic(settings.generation)}
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers)
    try:
        await admin.start()
        await consumer.start()
        partitions = [TopicPartition(t, p) for t in topics for p in range(settings.kafka.partitions)]
        ends = await consumer.end_offsets(partitions)
        groups = [g[0] for g in await admin.list_consumer_groups()
                  if g[0].startswith(settings.kafka.topic_prefix + ".")]
        lag = 0
        for group in groups:
            committed = await admin.list_consumer_group_offsets(group)
            mine = {tp.topic for tp in committed if tp.topic in topics}
            for tp, end in ends.items():
                if tp.topic in mine:
                    meta = committed.get(tp)
                    lag += max(0, end - (meta.offset if meta is not None and meta.offset >= 0 else 0))
        return lag
    except Exception as error:  # noqa: BLE001 - the poll falls back to "nothing changed for a while"
        print(f"  (kafka lag unknown: {error})", flush=True)
        return None
    finally:
        await consumer.stop()
        await admin.close()


async def settle(db: Db, settings, total: int, timeout: float, quiet: float) -> dict:
    """Poll until every message is projected, no summary is in flight, the run's consumer groups
    have no lag, and nothing derived has changed for `quiet` seconds (or `timeout` passes).
    Transaction markers can leave a lag of a record or two: after 3 x `quiet` without any
    change, a small lag counts as settled too."""
    started, last, since = time.monotonic(), None, time.monotonic()
    while True:
        counts = {k: await db.value(sql) for k, sql in COUNTS.items()}
        counts["kafka_lag"] = await kafka_lag(settings)
        elapsed = time.monotonic() - started
        if counts != last:
            last, since = counts, time.monotonic()
            print(f"  [{elapsed:5.0f}s] " + " ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
        stable = time.monotonic() - since
        lag = counts["kafka_lag"]
        drained = lag == 0 or (stable >= 3 * quiet and (lag is None or lag <= 2 * settings.kafka.partitions))
        if counts["messages"] == total and not counts["summaries_processing"] and stable >= quiet and drained:
            return {**counts, "settled": True, "seconds": round(elapsed - stable, 1)}
        if elapsed > timeout:
            print(f"  not settled after {timeout:.0f}s: measuring anyway", flush=True)
            return {**counts, "settled": False, "seconds": round(elapsed, 1)}
        await asyncio.sleep(3)


async def derived_memory(db: Db, conv) -> dict[str, str]:
    """Everything memory derived from one conversation, by kind."""
    cid = conv.conversation_id
    parts = {
        "summaries": await db.rows("SELECT memory_text FROM memory WHERE tenant_id = %s AND conversation_id = %s"
                                   " AND status = 'completed'", (TENANT, cid)),
        "chunks": await db.rows("SELECT content FROM conversation_chunks WHERE tenant_id = %s AND"
                                " conversation_id = %s", (TENANT, cid)),
        "facts": await db.rows("SELECT content FROM facts WHERE tenant_id = %s AND owner_user_id = %s",
                               (TENANT, user_of(conv))),
        "topic_summaries": await db.rows("SELECT summary FROM topics WHERE tenant_id = %s AND conversation_id = %s"
                                         " AND summary IS NOT NULL", (TENANT, cid)),
    }
    return {kind: "\n".join(r[0] or "" for r in rows) for kind, rows in parts.items()}


async def ask(http: httpx.AsyncClient, conv, question, budget: int) -> dict:
    params = {"before_seq": conv.end_seq, "query": question.question, "budget_tokens": budget}
    for attempt in (1, 2):  # uvicorn closes a connection after a 500; the next request's reuse of it fails
        started = time.perf_counter()
        try:
            response = await http.get(f"/v1/conversations/{conv.conversation_id}/context", params=params)
            break
        except httpx.TransportError as error:  # twice: counted (status 0), the run goes on
            if attempt == 2:
                print(f"  {question.qid}: no response ({type(error).__name__})", flush=True)
                response = httpx.Response(0, content=b"")
    ms = (time.perf_counter() - started) * 1000
    if response.status_code >= 500:
        print(f"  {question.qid}: HTTP {response.status_code} for {question.question!r}", flush=True)
    body = response.json() if response.status_code == 200 else {}
    retrieved = body.get("retrieved") or {}
    text = retrieved.get("text") or ""
    return {"qid": question.qid, "kind": question.kind, "status": response.status_code, "ms": round(ms, 1),
            "bytes": len(response.content), "mode": body.get("mode"), "gap": len(body.get("messages") or []),
            "tokens_used": retrieved.get("tokens_used"), "items": len(retrieved.get("items") or []),
            "error": retrieved.get("error"), "score": S.score(question.answer, text),
            "exact": S.exact(question.answer, text)}


async def clear_surfaced(db: Db, conv) -> None:
    """Forget what this conversation was shown (a measured checkout without the table has nothing to forget)."""
    try:
        await db.conn.execute("DELETE FROM surfaced_items WHERE tenant_id = %s AND conversation_id = %s",
                              (TENANT, conv.conversation_id))
    except psycopg.errors.UndefinedTable:
        pass


def baselines(conv, budgets: list[int]) -> dict[int, list[dict]]:
    """BM25 over the conversation's raw messages, lines (with their date) best first into each budget."""
    from retrieval.tokens import count_tokens  # the measured checkout's token counter

    lines = [S.render_line(m.content, m.occurred_at) for m in conv.messages]
    index = S.BM25([m.content for m in conv.messages])
    cost = {}

    def count(line: str) -> int:
        if line not in cost:
            cost[line] = count_tokens(line)
        return cost[line]

    out: dict[int, list[dict]] = {b: [] for b in budgets}
    for q in conv.questions:
        ranked = [lines[i] for i in index.ranked(q.question)]
        for budget in budgets:
            text, used = S.pack(ranked, budget, count)
            out[budget].append({"qid": q.qid, "kind": q.kind, "score": S.score(q.answer, text),
                                "exact": S.exact(q.answer, text), "tokens": used})
    return out


async def run(args) -> dict:
    if args.quick:
        shape = dict(sessions=(15, 18), turns=(14, 22))
    else:
        shape = dict(sessions=(15, 30), turns=(14, 30))
    conversations = longconv.generate(args.seed, args.conversations, **shape)
    total = sum(len(c.messages) for c in conversations)
    questions = sum(len(c.questions) for c in conversations)
    print(f"{len(conversations)} conversations, {total} messages, {questions} questions", flush=True)
    settings = common.bench_settings("ctxq")
    print(f"generation {settings.generation}, topic prefix {settings.kafka.topic_prefix}", flush=True)
    await common.prepare(settings)
    port = _free_port()
    result: dict = {"machine": common.machine(), "command": " ".join(sys.argv), "code": measured_code(),
                    "pythonpath": os.environ.get("PYTHONPATH", ""), "generation": settings.generation,
                    "dataset": {"seed": args.seed, "conversations": len(conversations), "messages": total,
                                "questions": questions, **{k: list(v) for k, v in shape.items()},
                                "kinds": dict(Counter(q.kind for c in conversations for q in c.questions))},
                    "budget_tokens": args.budget}
    api = None
    try:
        async with common.worker(settings):
            api = start_api(settings, port)
            started = time.monotonic()
            result["ingest_messages"] = await ingest(settings, conversations)
            print(f"ingested {total} messages in {time.monotonic() - started:.1f}s; waiting for memory to settle",
                  flush=True)
            async with Db(settings) as db:
                result["settle"] = await settle(db, settings, total, args.settle_timeout, args.quiet)
                result.update(await measure(db, conversations, port, args.budget))
    finally:
        if api is not None:
            api.terminate()
            api.wait(30)
        if not args.keep:
            await drop_everything(settings)
        else:
            print(f"kept: schema {settings.pg_schema}, topics {settings.kafka.topic_prefix}.*")
    return result


async def wait_healthy(http: httpx.AsyncClient, timeout_s: float = 180.0) -> None:
    """Until the API under `http`'s base URL answers /healthz (polled every 0.2 s)."""
    for _ in range(int(timeout_s / 0.2)):
        try:
            if (await http.get("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("the API did not become healthy")


async def measure(db: Db, conversations, port: int, budget: int) -> dict:
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": API_KEY}, timeout=60) as http:
        await wait_healthy(http)
        first = conversations[0]
        await ask(http, first, first.questions[0], budget)  # warm up: model, pool, plans (not counted)
        first_turn, sequential = [], []
        print("first-turn pass (surfaced_items of the conversation deleted in PostgreSQL before each question)",
              flush=True)
        for conv in conversations:
            for q in conv.questions:
                await clear_surfaced(db, conv)
                first_turn.append(await ask(http, conv, q, budget))
        print("sequential pass (surfaced_items deleted once per conversation, then every question in order)",
              flush=True)
        for conv in conversations:
            await clear_surfaced(db, conv)
            for q in conv.questions:
                sequential.append(await ask(http, conv, q, budget))
    budgets = sorted({budget, 2000})
    bm25: dict[int, list[dict]] = {b: [] for b in budgets}
    ceiling: dict[str, list[dict]] = {}
    memory_sizes: Counter = Counter()
    for conv in conversations:
        for b, rows in baselines(conv, budgets).items():
            bm25[b] += rows
        memory = await derived_memory(db, conv)
        for kind, text in memory.items():
            memory_sizes[kind] += len(text)
        for name, rows in R.ceilings(conv, memory).items():
            ceiling.setdefault(name, []).extend(rows)
    coverage = await db.rows(
        "SELECT c.conversation_id, c.last_seq, max(m.end_sequence) FROM conversations c LEFT JOIN memory m ON"
        " m.tenant_id = c.tenant_id AND m.conversation_id = c.conversation_id AND m.status = 'completed'"
        " WHERE c.tenant_id = %s GROUP BY c.conversation_id, c.last_seq ORDER BY 1", (TENANT,))
    return {
        "first_turn": S.summarize(first_turn, R.KINDS), "sequential": S.summarize(sequential, R.KINDS),
        **{f"bm25_{b}": S.summarize(rows, R.KINDS) for b, rows in bm25.items()},
        **{f"ceiling_{name}": S.summarize(rows, R.KINDS) for name, rows in ceiling.items()},
        "responses": R.response_stats(first_turn + sequential),
        "responses_first_turn": R.response_stats(first_turn), "responses_sequential": R.response_stats(sequential),
        "derived_memory_chars": dict(memory_sizes),
        "summary_coverage": [{"conversation": c, "last_seq": last, "summary_end_seq": end}
                             for c, last, end in coverage],
        "per_question": {"first_turn": first_turn, "sequential": sequential},
    }


async def drop_everything(settings) -> None:
    """This run's schema, its registry row and its Kafka topics."""
    await common.drop(settings)
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
        try:
            await conn.execute("DELETE FROM public.memory_generations WHERE topic_prefix = %s",
                               (settings.kafka.topic_prefix,))
        except psycopg.errors.UndefinedTable:
            pass
    await common.drop_topics(settings.kafka.bootstrap_servers, settings.kafka.topic_prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 shorter conversations: a few minutes")
    parser.add_argument("--conversations", type=int, help="default 10 (2 with --quick)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=int, default=500, help="budget_tokens of the context calls")
    parser.add_argument("--keep", action="store_true", help="keep the schema and topics at the end")
    parser.add_argument("--out", type=Path, help="JSON file (default /tmp/memory-agent-bench/context-quality-*.json)")
    parser.add_argument("--settle-timeout", type=float, help="seconds (default 900, 2400 without --quick)")
    parser.add_argument("--quiet", type=float, default=30.0, help="seconds without change that count as settled")
    args = parser.parse_args()
    if args.conversations is None:
        args.conversations = 2 if args.quick else 10
    if args.settle_timeout is None:
        args.settle_timeout = 900.0 if args.quick else 2400.0
    print(f"machine: {common.machine()}\ncommand: {' '.join(sys.argv)}\nmeasuring: {measured_code()}", flush=True)
    result = asyncio.run(run(args))
    out = args.out or Path(f"/tmp/memory-agent-bench/context-quality-{result['generation']}.json")
    result["aims"] = [{"aim": a, "met": met, "value": v} for a, met, v in R.aims(result, args.budget)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print("\n" + R.table(result, args.budget) + "\n")
    r = result["responses"]
    print(f"responses: {r['calls']} calls, 5xx {r['5xx']}, no response {r['no_response']}, bytes max {r['bytes_max']} p50 {r['bytes_p50']}, "
          f"over 64 KB {r['over_64kb']}, latency p50 {r['latency_ms_p50']} ms p99 {r['latency_ms_p99']} ms, "
          f"modes {r['modes']}, gap messages p50 {r['gap_messages_p50']} max {r['gap_messages_max']}, "
          f"retrieved tokens p50 {r['tokens_used_p50']}")
    print("aims (issue 16):")
    for aim in result["aims"]:
        print(f"  {'met    ' if aim['met'] else 'NOT met'}  {aim['aim']}: {aim['value']}")
    print(f"settled: {result['settle']}")
    print(f"JSON: {out}")


if __name__ == "__main__":
    main()

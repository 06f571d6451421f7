"""Turn-start context quality on the LoCoMo development set, with a diagnosis per question
(docs/evaluation.md, "The development set").

    python bench/locomo.py [--data FILE] [--budget 500] [--keep] [--out FILE.json]
    python bench/locomo.py --reuse GENERATION:TOPIC_PREFIX [--first-turn-only]   # ask again, no ingest
    python bench/locomo.py --reuse GENERATION:TOPIC_PREFIX --load-clients 32    # contexts/s against /healthz

Runs the set exactly as its README says (bench/locomo_data.py): ingests every message as
`message.appended` through the SDK into the real stack (a worker process and the API under
uvicorn, on Kafka + PostgreSQL, unique topic prefix and generation), waits until memory has
settled, then asks each question at the end of its conversation with
GET /v1/conversations/{id}/context?before_seq=<end>&query=<question>&budget_tokens=500,
first-turn and in sequence, scores answer words and hits per category beside BM25 over the
raw messages at 500 and 2,000 tokens (bench/context_quality.py does all of that; this script
feeds it the real set). Then the diagnosis (bench/locomo_diagnosis.py): each question asked
once more with a large budget, to tell whether a missed answer is not in memory at all, not
among the search candidates, ranked out, or cut by packing.

The data is CC BY-NC: it is read at run time ($MEMORY_LOCOMO_DEV or
../shared/eval-data/locomo-dev.json), never copied into the repository.

`--keep` keeps the run's schema and topics; `--reuse` then measures another checkout's read
path (ranking, packing) on the same derived memory in minutes, without ingesting again: the
API of the code under test is started on the kept schema.

`--load-clients N` (with --reuse) asks no quality passes: N clients in a closed loop ask the set's
questions at random (each at its conversation's end, the budget above) for `--load-requests`
contexts, with the same N clients calling GET /healthz on the same server before and after them:
contexts/s, their p50/p99 and the ratio to the /healthz rate measured in the same run (issue 25's
aim on long conversations; the rate is the mean of both /healthz passes, each given too). The API
process's CPU per context and per /healthz (from /proc) are given as well: the clients share the
cores, so the rates swing with the machine's load, and the ratio of the CPU costs says what the
API alone would do. `--healthz-client PATH` runs the /healthz passes with a native load generator
(`go install github.com/rakyll/hey@latest`; 20x the contexts' count each, same connections):
Python clients on the same two cores reach a few hundred /healthz a second, far under what the
server answers, which flatters the ratio (docs/retrieval.md, "Seventh round"). `--context-client
PATH` asks the contexts a second time, after the Python clients, with a native one too
(`go install github.com/tsenart/vegeta/v12@v12.13.0`: the same count of random questions from the
same seed, one GET per target of its JSON targets format, `-rate=0`, as many workers as clients),
so both rates are the server's; the ratio is given both ways (docs/retrieval.md, "Ninth round").
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

import httpx

HERE = Path(__file__).resolve().parent

_spec = importlib.util.spec_from_file_location("locomo_context_quality", HERE / "context_quality.py")
cq = importlib.util.module_from_spec(_spec)  # the harness: API, ingest, settle, ask, BM25, ceilings
sys.modules[_spec.name] = cq
_spec.loader.exec_module(cq)
longconv = sys.modules["ctx_eval_longconv"]
sys.modules["longconv"] = longconv  # what locomo_data imports when loaded by path
data = cq._load("locomo_data")  # this script's siblings, never the measured checkout's bench.
D = cq._load("locomo_diagnosis")
profiles = cq._load("profile_table")
S, R, common = cq.S, cq.R, cq.common


def reuse_settings(spec: str):
    """Settings of a kept run: `GENERATION:TOPIC_PREFIX` as printed by a run with --keep."""
    from memory_agent.settings import KafkaSettings, PostgresSettings, Settings, get_settings

    generation, _, prefix = spec.partition(":")
    base = get_settings()
    return Settings(environment="test", generation=generation,
                    state_dir=Path(f"/tmp/memory-agent-bench/{generation}-reuse"),
                    kafka=KafkaSettings(bootstrap_servers=base.kafka.bootstrap_servers, topic_prefix=prefix,
                                        partitions=8),
                    postgres=PostgresSettings(dsn=base.postgres.dsn, pool_max_size=10))


async def ask_body(http: httpx.AsyncClient, conv, question, budget: int) -> dict:
    params = {"before_seq": conv.end_seq, "query": question.question, "budget_tokens": budget}
    for attempt in (1, 2):
        try:
            response = await http.get(f"/v1/conversations/{conv.conversation_id}/context", params=params)
            return response.json() if response.status_code == 200 else {}
        except httpx.TransportError:
            if attempt == 2:
                return {}
    return {}


def undated_bm25(conv, budgets: list[int]) -> dict[int, list[dict]]:
    """The set's README reference: BM25 over the raw messages, whole messages as they were sent
    (no date), best first into each budget (cq.baselines dates every line, which finds far
    more "when" answers)."""
    from retrieval.tokens import count_tokens

    index = S.BM25([m.content for m in conv.messages])
    cost: dict[str, int] = {}
    out: dict[int, list[dict]] = {b: [] for b in budgets}
    for q in conv.questions:
        ranked = [conv.messages[i].content for i in index.ranked(q.question)]
        for budget in budgets:
            text, _ = S.pack(ranked, budget, lambda line: cost[line] if line in cost
                             else cost.setdefault(line, count_tokens(line)))
            out[budget].append({"qid": q.qid, "kind": q.kind, "score": S.score(q.answer, text)})
    return out


async def measure(db, conversations, port: int, budget: int, diag_budget: int, sequential: bool,
                  dump_wide: Path | None = None) -> dict:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": cq.API_KEY},
                                 timeout=120) as http:
        await cq.wait_healthy(http, timeout_s=180.0)
        first = conversations[0]
        await cq.ask(http, first, first.questions[0], budget)  # warm up (not counted)
        first_turn, in_sequence, diagnosis = [], [], []
        print("first-turn pass, with the diagnosis's large-budget call", flush=True)
        for conv in conversations:
            for q in conv.questions:
                await cq.clear_surfaced(db, conv)
                row = await cq.ask(http, conv, q, budget)
                wide = {}
                if diag_budget:
                    await cq.clear_surfaced(db, conv)
                    wide = await ask_body(http, conv, q, diag_budget)
                first_turn.append(row)
                diagnosis.append((conv, q, row, wide))
        if sequential:
            print("sequential pass", flush=True)
            for conv in conversations:
                await cq.clear_surfaced(db, conv)
                for q in conv.questions:
                    in_sequence.append(await cq.ask(http, conv, q, budget))
    if dump_wide is not None and diag_budget:
        write_wide(dump_wide, diagnosis)
    budgets = sorted({budget, 2000})
    bm25: dict[int, list[dict]] = {b: [] for b in budgets}
    ceiling: dict[str, list[dict]] = {}
    memory_by_conv = {}
    undated: dict[int, list[dict]] = {b: [] for b in budgets}
    for conv in conversations:
        for b, rows in cq.baselines(conv, budgets).items():
            bm25[b] += rows
        for b, rows in undated_bm25(conv, budgets).items():
            undated[b] += rows
        memory = await cq.derived_memory(db, conv)
        memory_by_conv[conv.conversation_id] = memory
        for name, rows in R.ceilings(conv, memory).items():
            ceiling.setdefault(name, []).extend(rows)
    ceiling_by_qid = {r["qid"]: r for r in ceiling["derived"]}
    raw_by_qid = {r["qid"]: r for r in ceiling["raw_log"]}
    diagnosed = [] if not diag_budget else [D.diagnose(q, row, wide, budget, ceiling_by_qid[q.qid]["score"], raw_by_qid[q.qid]["score"])
                 for conv, q, row, wide in diagnosis]
    topics = await db.rows("SELECT conversation_id, count(*) FROM topics GROUP BY 1 ORDER BY 1")
    result = {
        "first_turn": S.summarize(first_turn, R.KINDS),
        **({"sequential": S.summarize(in_sequence, R.KINDS)} if sequential else {}),
        **{f"bm25_{b}": S.summarize(rows, R.KINDS) for b, rows in bm25.items()},
        **{f"bm25_undated_{b}": S.summarize(rows, R.KINDS) for b, rows in undated.items()},
        **{f"ceiling_{name}": S.summarize(rows, R.KINDS) for name, rows in ceiling.items()},
        "responses": R.response_stats(first_turn + in_sequence),
        "diagnosis": D.summarize(diagnosed, R.KINDS) if diagnosed else None,
        "evidence_recall": D.evidence_recall(diagnosed, R.KINDS) if diagnosed else None,
        "topics_per_conversation": {c: n for c, n in topics},
        "derived_memory_chars": {k: sum(len(m[k]) for m in memory_by_conv.values())
                                 for k in next(iter(memory_by_conv.values()), {})},
        "per_question": {"first_turn": first_turn, "sequential": in_sequence, "diagnosis": diagnosed},
    }
    return result


def cpu_ms(pid: int | None, read=None) -> float | None:
    """CPU so far in ms of a process (`read`: common.process_cpu_ms) or of a PostgreSQL server
    given its postmaster (common.server_cpu_ms); None if it cannot be read."""
    try:
        return None if pid is None else (read or common.process_cpu_ms)(pid)
    except (OSError, IndexError, ValueError):
        return None


def vegeta_targets(port: int, picks, budget: int) -> str:
    """The context GETs of `picks` ((conversation, question) pairs) as vegeta's JSON targets:
    one line each, the question in the URL's query string."""
    lines = []
    for conv, question in picks:
        query = urlencode({"before_seq": conv.end_seq, "query": question.question, "budget_tokens": budget})
        lines.append(json.dumps({"method": "GET", "header": {"X-API-Key": [cq.API_KEY]},
                                 "url": f"http://127.0.0.1:{port}/v1/conversations/{conv.conversation_id}/context?{query}"}))
    return "\n".join(lines) + "\n"


async def vegeta_closed_loop(tool: str, targets: str, clients: int) -> tuple[float, list[float], Counter]:
    """Every target once (`-lazy`: the attack ends with the file), by `clients` workers of vegeta
    (Go) as fast as the server answers (`-rate=0`): (seconds, [p50, p99] in ms, statuses)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "targets.json")
        path.write_text(targets)
        attack = await asyncio.create_subprocess_exec(
            tool, "attack", "-format=json", "-lazy", f"-targets={path}", "-rate=0", f"-workers={clients}",
            f"-max-workers={clients}", "-timeout=120s", "-output", str(path.with_suffix(".bin")),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out = (await attack.communicate())[0].decode()
        if attack.returncode != 0:
            raise RuntimeError(f"{tool} attack failed ({attack.returncode}): {out[-2000:]}")
        report = await asyncio.create_subprocess_exec(tool, "report", "-type=json", str(path.with_suffix(".bin")),
                                                      stdout=asyncio.subprocess.PIPE)
        metrics = json.loads((await report.communicate())[0])
    seconds = (metrics["duration"] + metrics["wait"]) / 1e9  # first request sent to last answer
    latencies = [metrics["latencies"]["50th"] / 1e6, metrics["latencies"]["99th"] / 1e6]
    statuses = Counter({int(code): n for code, n in metrics["status_codes"].items()})
    if "no targets to attack" in (metrics.get("errors") or []):  # the lazy targets' end: a result, no request
        statuses[0] -= 1
    return seconds, latencies, +statuses


@asynccontextmanager
async def sampled(out: Path | None, pid: int | None):
    """py-spy (the project's venv's: .venv/bin/py-spy beside the interpreter) sampling `pid` at
    200 Hz while the block runs, its raw folded stacks written to `out` (bench/profile_table.py
    reads them); nothing when `out` is None."""
    if out is None or pid is None:
        yield
        return
    spy = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid), "--rate", "200", "--nonblocking",
        "--format", "raw", "-o", str(out), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        await spy.wait()
        print("profile of the contexts' pass:\n" + profiles.render(*profiles.table(out.read_text().splitlines())),
              flush=True)


HEY_RATE = re.compile(r"Requests/sec:\s+([0-9.]+)")


async def native_closed_loop(tool: str, url: str, clients: int, count: int) -> tuple[float, list[float], Counter]:
    """`count` GETs of `url` by `clients` connections of a native load generator (`hey`: Go, so
    the rate is the server's, not a Python client's sharing the cores): (seconds, [], statuses)."""
    proc = await asyncio.create_subprocess_exec(tool, "-c", str(clients), "-n", str(count), "-H",
                                                f"X-API-Key: {cq.API_KEY}", url, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out = (await proc.communicate())[0].decode()
    rate = HEY_RATE.search(out)
    if proc.returncode != 0 or rate is None:
        raise RuntimeError(f"{tool} failed ({proc.returncode}): {out[-2000:]}")
    statuses = Counter({int(code): int(n) for code, n in re.findall(r"\[(\d{3})\]\s+(\d+) responses", out)})
    return count / float(rate.group(1)), [], statuses


async def load_pass(port: int, conversations, clients: int, requests: int, budget: int, seed: int = 5,
                    api_pid: int | None = None, healthz_client: str | None = None,
                    context_client: str | None = None, postmaster: int | None = None,
                    py_spy: Path | None = None) -> dict:
    """`clients` in a closed loop on /healthz, on random questions of the set, then on /healthz
    again: the same server, the same minutes (nothing surfaced is cleared: a conversation's
    questions pile up as in use). `api_pid`: the server's process, whose CPU each pass costs;
    `postmaster`: PostgreSQL's, if it runs here (private stack: all its CPU is the pass's).
    `healthz_client`: a native load generator (`hey`) for the /healthz passes instead of the
    Python clients, which cannot load the server's cheapest endpoint on two shared cores.
    `context_client`: vegeta, asking the same count of contexts again after the Python clients
    (questions drawn from the same seed), so the contexts' rate is the server's too. `py_spy`:
    the API process sampled over the contexts' pass (the native one if any) into this file."""
    rng, questions = random.Random(seed), [(conv, q) for conv in conversations for q in conv.questions]

    async def closed_loop(count: int, call) -> tuple[float, list[float], Counter]:
        todo, latencies, statuses = iter(range(count)), [], Counter()

        async def client() -> None:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": cq.API_KEY},
                                         timeout=120) as http:
                for _ in todo:
                    started = time.perf_counter()
                    statuses[(await call(http)).status_code] += 1
                    latencies.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - started, latencies, statuses

    async def context(http: httpx.AsyncClient) -> httpx.Response:
        conv, question = rng.choice(questions)
        return await http.get(f"/v1/conversations/{conv.conversation_id}/context",
                              params={"before_seq": conv.end_seq, "query": question.question, "budget_tokens": budget})

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": cq.API_KEY},
                                 timeout=120) as http:
        await cq.wait_healthy(http, timeout_s=180.0)
        for _ in range(2 * clients):  # warm up: the model, the pool, the plans (not counted)
            await context(http)
    health = requests * 2 if healthz_client is None else requests * 20  # each /healthz pass

    async def timed(count: int, loop) -> tuple[float, list[float], Counter, float | None, float | None]:
        """A pass of `count` requests (`loop()` runs it): its seconds, latencies and statuses, and
        the API's and PostgreSQL's CPU-ms per request over it."""
        api, pg = cpu_ms(api_pid), cpu_ms(postmaster, common.server_cpu_ms)
        seconds, latencies, statuses = await loop()
        api_after, pg_after = cpu_ms(api_pid), cpu_ms(postmaster, common.server_cpu_ms)
        return (seconds, latencies, statuses, None if api is None or api_after is None else (api_after - api) / count,
                None if pg is None or pg_after is None else (pg_after - pg) / count)

    def healthz_pass():
        if healthz_client:  # /healthz by the native client
            return native_closed_loop(healthz_client, f"http://127.0.0.1:{port}/healthz", clients, health)
        return closed_loop(health, lambda http: http.get("/healthz"))

    before = await timed(health, healthz_pass)
    async with sampled(py_spy if not context_client else None, api_pid):
        seconds, latencies, statuses, context_cpu, context_pg = await timed(
            requests, lambda: closed_loop(requests, context))
    native = None
    if context_client:
        same = random.Random(seed)  # the Python clients' draws, in the same order
        targets = vegeta_targets(port, [same.choice(questions) for _ in range(requests)], budget)
        async with sampled(py_spy, api_pid):
            native = await timed(requests, lambda: vegeta_closed_loop(context_client, targets, clients))
    after = await timed(health, healthz_pass)
    contexts_per_s = requests / seconds
    healthz_rates = [health / before[0], health / after[0]]
    healthz_per_s = sum(healthz_rates) / 2
    health_cpu = None if before[3] is None or after[3] is None else (before[3] + after[3]) / 2
    return {"clients": clients, "requests": requests, "statuses": dict(statuses),
            "contexts_per_s": round(contexts_per_s, 1), "p50_ms": round(common.percentile(latencies, 50), 1),
            "p99_ms": round(common.percentile(latencies, 99), 1), "healthz_per_s": round(healthz_per_s, 1),
            "healthz_per_s_before_after": [round(rate, 1) for rate in healthz_rates],
            "healthz_client": healthz_client or "python (httpx)", "healthz_statuses": dict(before[2] + after[2]),
            "healthz_p50_ms": round(common.percentile(before[1] + after[1], 50), 1) if before[1] else None,
            "contexts_per_healthz": round(contexts_per_s / healthz_per_s, 4),
            "api_cpu_ms_per_context": None if context_cpu is None else round(context_cpu, 2),
            "postgres_cpu_ms_per_context": None if context_pg is None else round(context_pg, 2),
            "api_cpu_ms_per_healthz": None if health_cpu is None else round(health_cpu, 3),
            "healthz_cpu_per_context_cpu": None if context_cpu is None or health_cpu is None
            else round(health_cpu / context_cpu, 4),
            **({} if native is None else native_context_figures(native, requests, healthz_per_s, health_cpu,
                                                                 context_client)),
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def native_context_figures(native, requests: int, healthz_per_s: float, health_cpu: float | None,
                           tool: str) -> dict:
    """The native client's pass beside the Python clients': its rate, latencies and ratio."""
    seconds, (p50, p99), statuses, cpu, pg = native
    rate = requests / seconds
    return {"native": {"context_client": tool, "statuses": dict(statuses), "contexts_per_s": round(rate, 1),
                       "p50_ms": round(p50, 1), "p99_ms": round(p99, 1),
                       "contexts_per_healthz": round(rate / healthz_per_s, 4),
                       "api_cpu_ms_per_context": None if cpu is None else round(cpu, 2),
                       "postgres_cpu_ms_per_context": None if pg is None else round(pg, 2),
                       "healthz_cpu_per_context_cpu": None if cpu is None or health_cpu is None
                       else round(health_cpu / cpu, 4)}}


def write_wide(path: Path, diagnosis) -> None:
    """One JSON line per question: its large-budget `retrieved` section (items with their
    score breakdowns and tokens), for re-ranking and re-packing offline (bench/locomo_rerank.py).
    It holds the set's text: keep it outside the repository."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for conv, q, _row, wide in diagnosis:
            out.write(json.dumps({"qid": q.qid, "kind": q.kind, "question": q.question, "answer": q.answer,
                                  "retrieved": (wide or {}).get("retrieved"),
                                  "sections": D.other_sections(wide or {})}, default=str) + "\n")


async def behind(db, conversations, slack: int) -> dict[str, dict]:
    """Conversations whose chunks or completed summaries end more than `slack` messages before
    the conversation's end: memory is still being derived (a loaded machine can leave the
    stream quiet for minutes while a worker catches up, which the quiet-time rule alone takes
    for settled)."""
    out = {}
    for conv in conversations:
        chunk_end = await db.value("SELECT max(message_range_end) FROM conversation_chunks WHERE conversation_id = %s",
                                   (conv.conversation_id,))
        summary_end = await db.value("SELECT max(end_sequence) FROM memory WHERE conversation_id = %s AND"
                                     " status = 'completed'", (conv.conversation_id,))
        if (chunk_end or 0) < conv.end_seq - slack or (summary_end or 0) < conv.end_seq - slack:
            out[conv.conversation_id] = {"end": conv.end_seq, "chunks_to": chunk_end, "summaries_to": summary_end}
    return out


async def settle(db, settings, conversations, total: int, timeout: float, quiet: float, slack: int) -> dict:
    """bench/context_quality.py's settle, again until no conversation's memory is behind."""
    started = time.monotonic()
    while True:
        state = await cq.settle(db, settings, total, max(timeout - (time.monotonic() - started), quiet), quiet)
        late = await behind(db, conversations, slack)
        if not late or not state["settled"]:
            return {**state, "behind": late, "seconds": round(time.monotonic() - started, 1)}
        print(f"  quiet, but memory is behind: {late}; waiting", flush=True)


async def run(args) -> dict:
    if args.generated:  # bench/longconv.py's set, as context_quality.py --quick makes it
        conversations = longconv.generate(1, args.generated, sessions=(15, 18), turns=(14, 22))
    else:
        conversations = data.load(args.data)
    total = sum(len(c.messages) for c in conversations)
    questions = sum(len(c.questions) for c in conversations)
    print(f"{len(conversations)} conversations, {total} messages, {questions} questions (categories 1-4)",
          flush=True)
    settings = reuse_settings(args.reuse) if args.reuse else common.bench_settings("locomo")
    print(f"generation {settings.generation}, topic prefix {settings.kafka.topic_prefix}"
          f" (--reuse {settings.generation}:{settings.kafka.topic_prefix})", flush=True)
    result: dict = {"machine": common.machine(), "command": " ".join(sys.argv), "code": cq.measured_code(),
                    "generation": settings.generation, "topic_prefix": settings.kafka.topic_prefix,
                    "dataset": {"conversations": len(conversations), "messages": total, "questions": questions,
                                "kinds": dict(Counter(q.kind for c in conversations for q in c.questions))},
                    "budget_tokens": args.budget}
    port = cq._free_port()
    api = None
    try:
        if args.reuse:
            api = cq.start_api(settings, port)
            async with cq.Db(settings) as db:
                result["settle"] = {"reused": True, **{k: await db.value(sql) for k, sql in cq.COUNTS.items()}}
                if args.load_clients:
                    result["load"] = await load_pass(port, conversations, args.load_clients, args.load_requests,
                                                     args.budget, api_pid=api.pid,
                                                     healthz_client=args.healthz_client,
                                                     context_client=args.context_client,
                                                     postmaster=await common.postmaster_pid(settings),
                                                     py_spy=args.py_spy)
                    return result
                result.update(await measure(db, conversations, port, args.budget, args.diag_budget,
                                            not args.first_turn_only, args.dump_wide))
        else:
            await common.prepare(settings)
            async with common.worker(settings):
                api = cq.start_api(settings, port)
                started = time.monotonic()
                result["ingest_messages"] = await cq.ingest(settings, conversations)
                print(f"ingested {total} messages in {time.monotonic() - started:.1f}s; waiting for memory to"
                      " settle", flush=True)
                async with cq.Db(settings) as db:
                    result["settle"] = await settle(db, settings, conversations, total, args.settle_timeout,
                                                    args.quiet, args.slack)
            async with cq.Db(settings) as db:  # the worker is stopped: nothing moves while we ask
                result.update(await measure(db, conversations, port, args.budget, args.diag_budget,
                                            not args.first_turn_only, args.dump_wide))
    finally:
        if api is not None:
            api.terminate()
            api.wait(30)
        if args.reuse or args.keep:
            print(f"kept: schema {settings.pg_schema}, topics {settings.kafka.topic_prefix}.*"
                  f" (--reuse {settings.generation}:{settings.kafka.topic_prefix})")
        else:
            await cq.drop_everything(settings)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="default $MEMORY_LOCOMO_DEV or ../shared/eval-data/locomo-dev.json")
    parser.add_argument("--generated", type=int, default=0,
                        help="N: instead of the development set, the generator's set of context_quality.py --quick"
                             " (seed 1, N conversations), with the same diagnosis and --keep/--reuse")
    parser.add_argument("--budget", type=int, default=500, help="budget_tokens of the context calls")
    parser.add_argument("--diag-budget", type=int, default=4000, help="the diagnosis call's budget_tokens (0: no diagnosis call)")
    parser.add_argument("--keep", action="store_true", help="keep the schema and topics at the end")
    parser.add_argument("--reuse", help="GENERATION:TOPIC_PREFIX of a kept run: ask again, no ingest")
    parser.add_argument("--first-turn-only", action="store_true", help="skip the sequential pass")
    parser.add_argument("--dump-wide", type=Path,
                        help="JSON lines of each question's large-budget items (outside the repo: it holds the set's text)")
    parser.add_argument("--out", type=Path, help="JSON file (default /tmp/memory-agent-bench/locomo-*.json)")
    parser.add_argument("--settle-timeout", type=float, default=2400.0)
    parser.add_argument("--quiet", type=float, default=30.0, help="seconds without change that count as settled")
    parser.add_argument("--slack", type=int, default=45,
                        help="settled only when chunks and summaries reach this close to each conversation's end")
    parser.add_argument("--load-clients", type=int, default=0,
                        help="with --reuse: no quality passes; N clients in a closed loop, then /healthz (above)")
    parser.add_argument("--load-requests", type=int, default=600, help="contexts asked by --load-clients")
    parser.add_argument("--healthz-client", metavar="PATH",
                        help="with --load-clients: a native load generator (rakyll/hey) for the /healthz passes"
                             " (20x the contexts' count each), so their rate is the server's, not Python's")
    parser.add_argument("--context-client", metavar="PATH",
                        help="with --load-clients: the contexts asked again by a native load generator"
                             " (tsenart/vegeta), so their rate is the server's too; both ratios are given")
    parser.add_argument("--py-spy", type=Path, metavar="FILE",
                        help="with --load-clients: py-spy samples the API over the contexts' pass (the native"
                             " one with --context-client) into FILE (raw folded stacks), and the table by part"
                             " is printed (bench/profile_table.py)")
    args = parser.parse_args()
    if args.load_clients and not args.reuse:
        parser.error("--load-clients measures a kept run: give --reuse GENERATION:TOPIC_PREFIX")
    print(f"machine: {common.machine()}\ncommand: {' '.join(sys.argv)}\nmeasuring: {cq.measured_code()}",
          flush=True)
    result = asyncio.run(run(args))
    out = args.out or Path(f"/tmp/memory-agent-bench/locomo-{result['generation']}-{int(time.time())}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    if "load" in result:
        print(f"load: {json.dumps(result['load'])}\nmachine after: {common.machine()}\nJSON: {out}")
        return
    print("\n" + D.table(result, args.budget) + "\n")
    if result["diagnosis"]:
        print(D.diagnosis_table(result) + "\n")
    r = result["responses"]
    print(f"responses: {r['calls']} calls, 5xx {r['5xx']}, no response {r['no_response']}, bytes max "
          f"{r['bytes_max']}, latency p50 {r['latency_ms_p50']} ms p99 {r['latency_ms_p99']} ms, "
          f"retrieved tokens p50 {r['tokens_used_p50']}")
    print(f"topics per conversation: {result['topics_per_conversation']}")
    print(f"settled: {result['settle']}")
    print(f"JSON: {out}")
    if os.environ.get("LOCOMO_PRINT_MISSES"):
        for row in result["per_question"]["diagnosis"]:
            if row["verdict"] != "hit":
                print(json.dumps(row))


if __name__ == "__main__":
    main()

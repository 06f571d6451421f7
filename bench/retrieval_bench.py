"""Retrieval at scale: context endpoint latency at 32 clients, recall@10 per search method, 1k search time.

    python -m bench.retrieval_bench [--n 100000] [--requests 2000] [--clients 32] [--keep | --reuse]
                                    [--api-embedding-threads 1] [--api-workers N] [--skip-api | --skip-recall]
                                    [--baseline DIR [--baseline-rounds 3] [--cached-queries]] [--server-cpu]
(from the repo root, with PostgreSQL up: `make infra-up`; Kafka is not needed.) Numbers: docs/retrieval.md.
Embeddings of the synthetic corpus are cached in .state/bench/ (23 minutes to make here, seconds to reload).
The context pass counts the API's round trips to PostgreSQL per context through a proxy (any load);
with --baseline it compares both trees' contexts byte for byte and their CPU per context.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
import psycopg
from psycopg.rows import class_row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file, not installed

from bench.common import machine, percentile, postmaster_pid, process_cpu_ms, server_cpu_ms  # noqa: E402
from core.embeddings import make_embedder  # noqa: E402
from core.settings import KafkaSettings, PostgresSettings, Settings, get_settings  # noqa: E402
from projections.migrate import migrate  # noqa: E402
from retrieval.search import Scope, SearchRow, search_sql, vector_literal  # noqa: E402
from retrieval.service import RetrievalConfig, rank_all, search_rows  # noqa: E402
from tests.support import labelled_set as L  # noqa: E402

GENERATION = "bench_retrieval"
# Its own deployment: the API follows the registry's active generation of its topic prefix,
# and the default prefix may have one on a developer's database.
TOPIC_PREFIX = "bench-retrieval"
API_KEY = "bench-key"
NAMES = ("Ana Ben Chloe Dev Elif Farid Greta Hiro Ines Jonas Kemal Lucia Mateo Nadia Oskar Priya Quinn Rafael "
         "Sana Tariq Uma Viktor Wen Yara Zoe Amara Bruno Chen Dario Esme Felix Gwen Hamid Ivy Jude Kai Lars").split()
_ = str.split
SLOTS = {
    "city": _("Lyon Oslo Porto Krakow Austin Osaka Dublin Tallinn Quito Nairobi Hanoi Denver Leeds Bergen Seville "
              "Montreal Adelaide Ghent Tbilisi Cusco Busan Graz Trieste Halifax"),
    "job": ["nurse", "civil engineer", "high-school teacher", "florist", "tax accountant", "bus driver",
            "veterinarian", "translator", "pharmacist", "carpenter", "UX designer", "paramedic", "geologist",
            "court interpreter", "landscape architect", "sound engineer", "midwife", "data analyst"],
    "weekday": _("Monday Tuesday Wednesday Thursday Saturday Sunday"),
    "month": _("January February April June July August September November December"),
    "pet": ["beagle", "tabby cat", "parrot", "tortoise", "greyhound", "pair of rabbits", "corgi", "gecko",
            "goldfish", "retired racing pigeon"],
    "pet_habit": ["steals socks", "sleeps on the radiator", "hates thunderstorms", "needs a pill every evening",
                  "howls at the vacuum cleaner", "only eats wet food", "escapes under the fence"],
    "allergen": ["peanuts", "shellfish", "penicillin", "bee stings", "latex", "cat hair", "sesame", "pollen"],
    "instrument": ["cello", "bass guitar", "trumpet", "accordion", "drums", "violin", "ukulele", "harp", "oboe"],
    "skill": ["throw pottery", "bake sourdough", "carve spoons", "paint watercolours", "play chess openings",
              "bind books", "brew kombucha", "restore furniture", "knit socks", "solder synthesizer kits"],
    "gift": ["wool scarf", "fountain pen", "cast-iron pan", "star map print", "board game", "leather wallet",
             "pair of hiking poles", "vinyl record"],
    "purchase": ["used camper van", "cargo bike", "piano", "deposit for a flat", "sewing machine", "kayak",
                 "electric scooter", "telescope"],
    "project": ["billing", "onboarding", "mobile app", "search", "reporting", "payments", "warehouse", "loyalty"],
    "tool": ["GitLab CI", "Terraform", "a monorepo", "Grafana", "Sentry", "feature flags", "Redis queues",
             "Bazel", "OpenTelemetry", "pair programming"],
    "relative": ["brother", "aunt", "cousin", "grandmother", "niece", "stepfather", "godson", "sister-in-law"],
    "feeling": ["relieved", "anxious", "proud", "frustrated", "hopeful", "exhausted", "nostalgic", "amused"],
    "diet": ["vegan", "on a low-sodium diet", "gluten intolerant", "doing intermittent fasting", "keto"],
    "dish": ["lamb tagine", "mushroom risotto", "pierogi", "green curry", "paella", "ramen", "lasagne"],
    "condition": ["asthma", "migraines", "high blood pressure", "a bad knee", "type 1 diabetes", "eczema"],
    "sport": ["rowing", "bouldering", "table tennis", "ultimate frisbee", "trail running", "fencing", "curling"],
    "team": ["Celtic", "the Blue Jays", "Ajax", "the Packers", "Benfica B", "the local hockey club"],
    "genre": ["crime", "science fiction", "historical", "romance", "fantasy", "literary", "horror"],
    "subject": ["marine biology", "art history", "statistics", "architecture", "nursing", "economics", "Mandarin"],
    "appliance": ["dishwasher", "boiler", "fridge", "washing machine", "oven", "garage door", "tumble dryer"],
    "fault": ["leaks after every cycle", "makes a grinding noise", "trips the fuse", "will not heat up",
              "smells of burning plastic"],
    "room": ["kitchen", "basement", "utility room", "garage", "attic"],
    "collectible": ["stamps", "vintage postcards", "board games", "fountain pens", "seashells", "enamel pins"],
    "event": ["wedding anniversary", "graduation", "retirement party", "citizenship ceremony", "first marathon"],
    "lang": ["Go", "Rust", "Kotlin", "TypeScript", "Elixir", "Java"],
    "opinion": ["open-plan offices kill focus", "daylight saving time should go", "board games beat video games",
                "winter is the best season", "audiobooks count as reading"],
}
FACTS = (
    "{name} works as a {job} in {city} and usually finishes late on {weekday}s.",
    "{name} is allergic to {allergen} and always carries medication on trips.",
    "{name} keeps a {pet} that {pet_habit}.",
    "{name} plays the {instrument} in a band that rehearses on {weekday} evenings.",
    "{name} is learning to {skill} at a community workshop in {city}.",
    "For the birthday in {month}, {name} would love a {gift}.",
    "{name} is saving for a {purchase} and puts money aside every month.",
    "The {project} team moved to {tool} in {month} after repeated problems with the old setup.",
    "{name}'s {relative} lives in {city} and calls every {weekday}.",
    "{name} grew up in {city} and moved away in {month} for a job as a {job}.",
    "{name} is {diet}, so no {dish} at family dinners any more.",
    "{name}'s signature dish is {dish}; the recipe came from a {relative} in {city}.",
    "{name} has {condition} and sees a specialist every {month}.",
    "{name} took up {sport} last year and competes in a regional league.",
    "{name} supports {team} and never misses a home game.",
    "{name} reads {genre} novels before bed, about two a month.",
    "{name} is studying {subject} part-time at the university in {city}.",
    "The {appliance} in the {room} {fault}; a technician comes in {month}.",
    "{name} collects {collectible} and keeps them in labelled boxes.",
    "{name}'s {event} is in {month}, and the party will be in {city}.",
    "The {project} service is written in {lang} and owned by {name}'s team.",
    "{name} firmly believes that {opinion}.",
    "{name} wants to spend a sabbatical in {city} learning {subject}.",
    "{name} and a {relative} are planning to run a half marathon in {city} in {month}.",
)
CHUNKS = (
    "{name} and the assistant went through the {project} roadmap; they agreed to try {tool} and revisit it "
    "in {month}.",
    "{name} talked about visiting a {relative} in {city} and felt {feeling} about the long journey.",
    "{name} asked how to {skill} at home; the assistant suggested starting small on {weekday} mornings.",
    "The conversation covered {name}'s {pet} that {pet_habit}; {name} felt {feeling} and will ask a vet in {city}.",
    "{name} compared {sport} clubs in {city}, worried about the cost, and picked the one open on {weekday}s.",
    "They drafted a meal plan for someone {diet}; {name} will test the {dish} variant first.",
    "{name} described the {appliance} that {fault} and asked whether a repair is worth it; the assistant said "
    "to get two quotes.",
    "{name} was {feeling} after the {event} and wanted ideas for a thank-you note to the {relative}.",
    "The assistant explained how {condition} is usually managed; {name} will ask the doctor in {month}.",
    "{name} wanted {genre} book recommendations for a long train ride to {city}.",
)


def corpus(n: int, seed: int = 7) -> list[tuple[str, str]]:
    """n distinct (kind, text) pairs from the templates above, ~30 % chunks (deterministic).
    The labelled topics (networks, backups, deploys, Grandpa Joe...) are kept out on purpose,
    so a synthetic item never silently answers a labelled query."""
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < n:
        kind = "chunk" if rng.random() < 0.3 else "fact"
        template = rng.choice(CHUNKS if kind == "chunk" else FACTS)
        text = template.format(name=rng.choice(NAMES), **{k: rng.choice(v) for k, v in SLOTS.items()})
        if kind == "chunk" and rng.random() < 0.4:  # a longer summary that spans two topics
            extra = rng.choice(CHUNKS).format(name=rng.choice(NAMES), **{k: rng.choice(v) for k, v in SLOTS.items()})
            text = f"{text} Later, {extra[0].lower()}{extra[1:]}"
        if text not in seen:
            seen.add(text)
            out.append((kind, text))
    return out


def scope_for(i: int, rng: random.Random, users: int = 0) -> tuple[str, str, str | None]:
    """The first 1,000 items form seed 001's "1,000 memories" scope. With `users`, the rest are
    spread evenly over that many users of tenant-a ("u00042"), a third of them about a subject
    five users share ("family-8": its shared facts reach all five). Without (the layout of
    earlier rounds), they go to the labelled users (heavy users: most rows are in their
    scopes), 50 other users and tenant-b."""
    if i < 1000:
        return "bench-1k", "solo", None
    if users:
        user = rng.randrange(users)
        return L.A, synthetic_user(user), f"family-{user // 5}" if rng.random() < 1 / 3 else None
    r = rng.random()
    if r < 0.30:
        return L.A, "nox", None
    if r < 0.45:
        return L.A, "maria", L.JOE
    if r < 0.60:
        return L.A, "tom", L.JOE
    if r < 0.65:
        return L.A, "maria", L.ROSA
    if r < 0.90:
        return L.A, f"u{rng.randrange(50):02d}", rng.choice([None, "s1", "s2", "s3"])
    return L.B, rng.choice(["nox", "maria", "u01"]), rng.choice([None, L.JOE])


def synthetic_user(index: int) -> str:
    return f"u{index:05d}"


async def embed_cached(texts: list[str], settings: Settings) -> np.ndarray:
    embedder = make_embedder(settings)
    digest = hashlib.sha256(("\n".join(texts) + embedder.model).encode()).hexdigest()[:16]
    path = settings.state_dir / "bench" / f"retrieval-{len(texts)}-{digest}.npy"
    if path.exists():
        return np.load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    started, parts = time.perf_counter(), []
    for start in range(0, len(texts), 2048):
        parts.append(await embedder.embed_documents(texts[start:start + 2048]))
        print(f"  embedded {start + len(parts[-1])}/{len(texts)} ({time.perf_counter() - started:.0f}s)", flush=True)
    vectors = np.concatenate(parts) if parts else np.zeros((0, embedder.dimensions), np.float32)
    np.save(path, vectors)
    return vectors


def synthetic_memories(texts: list[tuple[str, str]], seed: int = 11, users: int = 0, start: int = 0
                       ) -> list[L.Memory]:
    rng, out = random.Random(seed + start), []
    for i, (kind, text) in enumerate(texts, start):
        tenant, user, subject = scope_for(i, rng, users)
        roll = rng.random()
        out.append(L.Memory(
            f"s{i:07d}", kind, tenant, user, subject, text, rng.choice(["hobby", "work", "family", "health", "other"]),
            importance=rng.choice([1, 2, 3, 3, 3, 4, 5]), age_days=rng.uniform(0, 400),
            visibility="shared" if subject is not None and kind == "fact" and rng.random() < 0.3 else "private",
            deleted=kind == "fact" and roll < 0.02, superseded=kind == "fact" and 0.02 <= roll < 0.05,
            conversation=f"old-{i}"))
    return out


# Built after the bulk load (faster, and as a deployment's would be after a backfill). The
# per-table HNSW indexes are read by nothing any more (memory_items is) and migration 0055
# drops them: built for `--legacy-indexes` only (the layout of earlier rounds).
INDEXES = (
    ("memory_items_embedding",
     "memory_items USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"),
    ("memory_items_tsv", "memory_items USING gin (content_tsv)"),
    ("facts_tsv", "facts USING gin (content_tsv)"),
    ("conversation_chunks_tsv", "conversation_chunks USING gin (content_tsv)"),
)
LEGACY_INDEXES = (
    ("facts_embedding", "facts USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"),
    ("conversation_chunks_embedding",
     "conversation_chunks USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"),
)
BATCH = 20_000


def random_vectors(n: int, seed: int, dimensions: int = 384) -> np.ndarray:
    """Seeded random unit vectors (synthetic: no neighbourhoods, the HNSW index's worst case)."""
    vectors = np.random.default_rng(seed).standard_normal((n, dimensions), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


CHAT = ("Morning! I have a few things on my mind today.", "Sure, what would you like to start with?",
        "Mostly planning the week and a couple of loose ends from last time.",
        "Happy to help. Tell me what is most urgent.")
QUESTIONS = (
    "What does {name} do for a living in {city}?", "Is {name} still learning to {skill}?",
    "What should I get {name} for the birthday in {month}?", "Remind me what {name}'s {pet} does.",
    "Which team moved to {tool} and why?", "Does {name} still rehearse on {weekday}?",
)


async def load(settings: Settings, n: int, conversations: int, *, users: int = 0, synthetic_vectors: bool = False,
               legacy_indexes: bool = True, hnsw: bool = True) -> dict:
    """A fresh generation schema: n synthetic items (indexes built after the COPY; memory_items
    filled by the tables' triggers), then the labelled set, and `conversations` short
    conversations for the load test (of the synthetic users when `users`, else of the labelled
    ones). `synthetic_vectors`: seeded random vectors instead of the model's for the synthetic
    items (the labelled set, conversations and queries always use the model)."""
    now = datetime.now(UTC)
    texts = corpus(n)
    vectors = None if synthetic_vectors else await embed_cached([t for _, t in texts], settings)
    labelled = await make_embedder(settings).embed_documents([m.content for m in L.MEMORIES])
    model = make_embedder(settings).model
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{settings.pg_schema}" CASCADE')
    await asyncio.to_thread(migrate, settings)
    started = time.perf_counter()
    indexes = INDEXES[0 if hnsw else 1:] + (LEGACY_INDEXES if legacy_indexes else ())
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
        for name, _ in INDEXES + LEGACY_INDEXES:
            await conn.execute(f"DROP INDEX IF EXISTS {name}")
        for start in range(0, len(texts), BATCH):
            batch = texts[start:start + BATCH]
            part = (random_vectors(len(batch), start) if vectors is None else vectors[start:start + BATCH])
            await L.insert_memories(conn, synthetic_memories(batch, users=users, start=start),
                                    [vector_literal(v) for v in part], model, now)
            await conn.commit()
            print(f"  loaded {start + len(batch)}/{len(texts)} ({time.perf_counter() - started:.0f}s)", flush=True)
        await conn.execute("SET maintenance_work_mem = '1GB'")
        for name, definition in indexes:
            await conn.execute(f"CREATE INDEX {name} ON {definition}")
            await conn.commit()
            print(f"  index {name} ({time.perf_counter() - started:.0f}s)", flush=True)
        # The labelled set goes in afterwards, into the built index, as a projector would insert
        # it: bulk-built first, these few off-topic rows ended up unreachable in the HNSW graph.
        await L.insert_memories(conn, L.MEMORIES, [vector_literal(v) for v in labelled], model, now)
        labelled_users = [("nox", None), ("maria", L.JOE), ("tom", L.JOE)]
        for c in range(conversations):
            user, subject = ((synthetic_user(c * users // conversations), None) if users
                             else labelled_users[c % len(labelled_users)])
            await conn.execute("INSERT INTO conversations (tenant_id, conversation_id, user_id, subject_id, last_seq,"
                               " message_count) VALUES (%s, %s, %s, %s, %s, %s)",
                               (L.A, f"bench-{c}", user, subject, len(CHAT) - 1, len(CHAT)))
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, subject_id, role,"
                    " content, occurred_at, source_partition, source_offset) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,0,0)",
                    [(L.A, f"bench-{c}", seq, f"e-{c}-{seq}", user, subject, "user" if seq % 2 == 0 else "assistant",
                      content, now - timedelta(minutes=10 - seq)) for seq, content in enumerate(CHAT)])
        await conn.commit()
        await analyze(conn, settings.pg_schema)
    return {"items": len(texts) + len(L.MEMORIES), "users": users or "labelled layout",
            "vectors": "synthetic (seeded random)" if synthetic_vectors else "model",
            "indexes": [name for name, _ in indexes],
            "load_and_index_s": round(time.perf_counter() - started, 1)}


async def recall_per_method(settings: Settings, k: int = 10) -> dict:
    """recall@k of the labelled queries among everything loaded, per search method."""
    embedder, now, out = make_embedder(settings), datetime.now(UTC).timestamp(), {}
    base = RetrievalConfig.from_settings(settings.retrieval)
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
        for method in ("vector", "keyword", "hybrid"):
            config, ranked = replace(base, method=method), {}
            for q in L.QUERIES:
                text = "\n".join([q.text, *reversed(q.context)])
                rows = await search_rows(conn, Scope(q.tenant, q.user, q.subject, "none"), text, embedder, config,
                                         q.text)
                ranked[q.id] = [s.candidate.item_id.split(":", 1)[1] for s in rank_all(rows, now, config)]
            out[method] = round(L.recall_at_k(ranked, k), 3)
            await conn.rollback()
        out["vector_exact_scan (reference)"] = await _exact_vector_recall(conn, embedder, base, now, k)
    return out


async def _exact_vector_recall(conn, embedder, config: RetrievalConfig, now: float, k: int) -> float:
    """The same vector search with the HNSW index bypassed (an exact scan of the scope): what the
    embedding model alone achieves, to tell index misses from model misses."""
    ranked = {}
    for q in L.QUERIES:
        literal = vector_literal(await embedder.embed_query("\n".join([q.text, *reversed(q.context)])))
        params = {"tenant": q.tenant, "user": q.user, "subject": q.subject, "conversation": "none",
                  "vector": literal, "keywords": "", "k": config.candidate_k, "lexemes": []}
        rows = []
        for kind in ("fact", "chunk"):
            sql = search_sql(kind, q.subject, vector=True, keyword=False).replace(
                "ORDER BY t.embedding <=> %(vector)s::vector", "ORDER BY (t.embedding <=> %(vector)s::vector) + 0")
            async with conn.cursor(row_factory=class_row(SearchRow)) as cur:
                await cur.execute(sql, params, prepare=False)
                rows += await cur.fetchall()
        ranked[q.id] = [s.candidate.item_id.split(":", 1)[1] for s in rank_all(rows, now, replace(config, method="vector"))]
    await conn.rollback()
    return round(L.recall_at_k(ranked, k), 3)


async def search_1k(settings: Settings, queries: int = 50) -> dict:
    """Seed 001's check: embed one query and search a 1,000-memory scope (facts + chunks)."""
    embedder, config = make_embedder(settings), RetrievalConfig.from_settings(settings.retrieval)
    rng, times = random.Random(3), []
    await embedder.embed_query("warm up")
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
        for _ in range(queries):
            text = rng.choice(QUESTIONS).format(name=rng.choice(NAMES), **{k: rng.choice(v) for k, v in SLOTS.items()})
            started = time.perf_counter()
            rows = await search_rows(conn, Scope("bench-1k", "solo", None, "none"), text, embedder, config)
            rank_all(rows, time.time(), config)
            times.append((time.perf_counter() - started) * 1000)
            await conn.rollback()
    return {"p50_ms": round(percentile(times, 50), 1), "p99_ms": round(percentile(times, 99), 1),
            "max_ms": round(max(times), 1)}


async def scope_recall(settings: Settings, users: int, questions: int = 5) -> dict:
    """recall@10 of the vector step against an exact scan, per scope (bench/scope_recall.py)."""
    from bench.scope_recall import sample_scopes, vector_recall_per_scope
    rng, embedder = random.Random(9), make_embedder(settings)
    texts = [rng.choice(QUESTIONS).format(name=rng.choice(NAMES), **{k: rng.choice(v) for k, v in SLOTS.items()})
             for _ in range(questions)]
    queries = [await embedder.embed_query(text) for text in texts]
    labelled = [("bench-1k", "solo", None), (L.A, "nox", None), (L.A, "maria", L.JOE), (L.A, "tom", L.JOE)]
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
        return await vector_recall_per_scope(conn, sample_scopes(users, labelled, user_name=synthetic_user), queries,
                                             RetrievalConfig.from_settings(settings.retrieval))


async def analyze(conn: psycopg.AsyncConnection, schema: str) -> None:
    """ANALYZE the schema's tables only: a database-wide ANALYZE deadlocks with other schemas' DDL
    on a shared server (it did)."""
    await conn.commit()
    tables = await (await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))).fetchall()
    for (table,) in tables:
        await conn.execute(f'ANALYZE "{schema}"."{table}"')
        await conn.commit()


def start_api(settings: Settings, port: int, threads: int | None, workers: int | None = None,
              source: Path | None = None, profile: Path | None = None) -> subprocess.Popen:
    """The real app under uvicorn in its own process (access log off, as behind a proxy), from
    this tree or from `source` (another checkout, e.g. main's, served against the same schema)."""
    # No topic worker runs here: the topic section would wait its full context_wait_ms (500 ms)
    # for a fold that never places the message, so that wait is turned off.
    env = dict(os.environ, MEMORY_GENERATION=settings.generation, MEMORY_POSTGRES__DSN=settings.postgres.dsn,
               MEMORY_KAFKA__TOPIC_PREFIX=settings.kafka.topic_prefix,
               MEMORY_API__API_KEYS=f'{{"{API_KEY}": "{L.A}"}}', MEMORY_LOG_LEVEL="WARNING",
               # One tenant: no share of the pool by default (api/limits.py tenant_share); the
               # closed loop of 32 clients queues for the pool itself: a long wait, not 503s.
               MEMORY_TOPICS__CONTEXT_WAIT_MS="0", MEMORY_API__POOL_TIMEOUT_S="60")
    if threads is not None:
        env["MEMORY_EMBEDDING__INTRA_OP_THREADS"] = str(threads)
    code = ("import uvicorn; from api.app import create_app; from core.settings import Settings; "
            f"uvicorn.run(create_app(Settings()), host='127.0.0.1', port={port}, log_level='warning', "
            "access_log=False)")
    if profile is not None:  # a CPU-clock cProfile of the event loop's thread, between SIGUSR1 and SIGUSR2
        code = ("import cProfile, signal, time; prof = cProfile.Profile(time.process_time); "
                "signal.signal(signal.SIGUSR1, lambda *a: prof.enable()); "
                f"signal.signal(signal.SIGUSR2, lambda *a: (prof.disable(), prof.dump_stats({str(profile)!r}))); "
                + code)
    if workers is not None:  # `memory-agent api --workers N`: uvicorn workers, each warmed up
        env["MEMORY_POSTGRES__POOL_MAX_SIZE"] = str(settings.postgres.pool_max_size)
        return subprocess.Popen([sys.executable, "-m", "memory_agent.cli", "api", "--workers", str(workers),
                                 "--port", str(port)], env=env, cwd=Path(__file__).resolve().parents[1],
                                stdout=subprocess.DEVNULL)  # its access log
    if source is not None:  # its packages first: `-c` puts the working directory on sys.path
        env["PYTHONPATH"] = str(source)
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=source or Path(__file__).resolve().parents[1])


class RoundTripProxy:
    """A TCP proxy in front of PostgreSQL that counts round trips: a connection's client
    sending again after the server answered (or for the first time) is one. A pipeline of
    statements sent before any answer is read is one; so is a statement. Independent of load."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port, self.trips = host, port, 0
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _connection(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(self.host, self.port)
        last = ["server"]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, side: str) -> None:
            try:
                while data := await src.read(1 << 16):
                    if side == "client" and last[0] == "server":
                        self.trips += 1
                    last[0] = side
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(client_r, server_w, "client"), pipe(server_r, client_w, "server"))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


async def count_round_trips(settings: Settings, args: argparse.Namespace, source: Path | None,
                            requests: int = 50) -> float:
    """Round trips between the API (this tree, or `source`) and PostgreSQL per context, one
    client, after the warm-up: the API's DSN points at a RoundTripProxy."""
    info = psycopg.conninfo.conninfo_to_dict(settings.postgres.dsn)
    proxy = RoundTripProxy(info.get("host") or "127.0.0.1", int(info.get("port") or 5432))
    port = await proxy.start()
    proxied = settings.model_copy(update={"postgres": settings.postgres.model_copy(update={
        "dsn": psycopg.conninfo.make_conninfo(settings.postgres.dsn, host="127.0.0.1", port=port)})})
    process, base_url = await started_api(proxied, args, source)
    try:
        await forget_surfaced(settings)
        before = proxy.trips
        await hammer(base_url, requests, 1, args.conversations, seed=2)
        return round((proxy.trips - before) / requests, 2)
    finally:
        process.terminate()
        process.wait(30)
        await proxy.stop()


async def hammer(base_url: str, requests: int, clients: int, conversations: int, seed: int = 5) -> dict:
    """`clients` httpx clients in a closed loop until `requests` context calls are done."""
    rng, latencies, statuses, next_id = random.Random(seed), [], {}, iter(range(requests))
    items: list[int] = []

    async def client() -> None:
        async with httpx.AsyncClient(base_url=base_url, headers={"X-API-Key": API_KEY}, timeout=30) as http:
            for _ in next_id:
                query = rng.choice(QUESTIONS).format(name=rng.choice(NAMES),
                                                     **{k: rng.choice(v) for k, v in SLOTS.items()})
                if rng.random() < 0.3:
                    query = rng.choice(L.QUERIES).text
                started = time.perf_counter()
                response = await http.get(f"/v1/conversations/bench-{rng.randrange(conversations)}/context",
                                          params={"query": query})
                latencies.append((time.perf_counter() - started) * 1000)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                retrieved = response.json().get("retrieved") if response.status_code == 200 else None
                if retrieved:
                    items.append(len(retrieved["items"]))

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return {"clients": clients, "requests": requests, "statuses": statuses,
            "p50_ms": round(percentile(latencies, 50), 1), "p90_ms": round(percentile(latencies, 90), 1),
            "p99_ms": round(percentile(latencies, 99), 1), "max_ms": round(max(latencies), 1),
            "throughput_rps": round(requests / elapsed, 1),
            "mean_items_returned": round(sum(items) / len(items), 2) if items else 0}


async def answers(settings: Settings, base_url: str, requests: int, conversations: int, seed: int) -> list:
    """The responses of `requests` one-client contexts (hammer's questions), nothing surfaced at
    the start."""
    await forget_surfaced(settings)
    rng, out = random.Random(seed), []
    async with httpx.AsyncClient(base_url=base_url, headers={"X-API-Key": API_KEY}, timeout=30) as http:
        for _ in range(requests):
            query = rng.choice(QUESTIONS).format(name=rng.choice(NAMES), **{k: rng.choice(v) for k, v in SLOTS.items()})
            if rng.random() < 0.3:
                query = rng.choice(L.QUERIES).text
            response = await http.get(f"/v1/conversations/bench-{rng.randrange(conversations)}/context",
                                      params={"query": query})
            out.append((response.status_code, response.content))
    return out


def served(answer: tuple[int, bytes]) -> tuple[int, object]:
    """A response without what counts the candidates left out (`excluded`, `excluded_total`,
    `candidates`): what the chat service is served, for comparing a tree that hands the ranking
    fewer candidates (retrieval.kept_per_100_tokens)."""
    status, body = answer
    if status != 200:
        return status, body
    context = json.loads(body)
    for key in ("excluded", "excluded_total", "candidates"):
        (context.get("retrieved") or {}).pop(key, None)
    return status, context


async def same_answers(settings: Settings, baseline_url: str, base_url: str, requests: int,
                       conversations: int) -> dict:
    """Both trees asked the same sequence of contexts (each from nothing surfaced, so the
    surfaced state evolves alike): how many responses are byte for byte the same."""
    theirs = await answers(settings, baseline_url, requests, conversations, seed=9)
    ours = await answers(settings, base_url, requests, conversations, seed=9)
    differ = [i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b]
    served_differ = [i for i in differ if served(theirs[i]) != served(ours[i])]
    return {"requests": requests, "identical": requests - len(differ), "first_differing": differ[:5],
            "identical_served": requests - len(served_differ), "first_served_differing": served_differ[:5],
            "items_per_context": round(sum(len(json.loads(b)["retrieved"]["items"]) for c, b in ours if c == 200
                                           and json.loads(b).get("retrieved")) / max(requests, 1), 2)}


async def hammer_healthz(base_url: str, requests: int, clients: int) -> dict:
    """The same closed loop on GET /healthz: the HTTP floor of this server, in the same run."""
    next_id, latencies = iter(range(requests)), []

    async def client() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
            for _ in next_id:
                started = time.perf_counter()
                (await http.get("/healthz")).raise_for_status()
                latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return {"clients": clients, "requests": requests, "p50_ms": round(percentile(latencies, 50), 1),
            "throughput_rps": round(requests / (time.perf_counter() - started), 1)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def forget_surfaced(settings: Settings) -> None:
    """Every pass starts with nothing surfaced (the same requests, the same exclusions)."""
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True) as conn:
        await conn.execute("TRUNCATE surfaced_items")


async def started_api(settings: Settings, args: argparse.Namespace, source: Path | None = None,
                      profile: Path | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = start_api(settings, port, args.api_embedding_threads, args.api_workers, source, profile)
    base_url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base_url, headers={"X-API-Key": API_KEY}, timeout=60) as http:
            for _ in range(1200):  # a loaded machine takes a while to load the model
                try:
                    if (await http.get("/v1/conversations/bench-0/context", params={"query": "hi"})).status_code:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            else:
                raise RuntimeError(f"the API on port {port} did not answer in 120 s")
        await hammer(base_url, 64, 4, args.conversations, seed=1)  # warm up: model, pool, plans
    except BaseException:
        process.terminate()
        process.wait(30)
        raise
    return process, base_url


async def measured(settings: Settings, process: subprocess.Popen, base_url: str, requests: int, clients: int,
                   conversations: int, seed: int, postmaster: int | None = None) -> dict:
    """One pass of the closed loop, with the API process's CPU per context (one process only:
    with --api-workers the children's CPU is not in it) and, given the postmaster of a server
    that runs nothing else, PostgreSQL's."""
    await forget_surfaced(settings)
    cpu = process_cpu_ms(process.pid)
    pg = server_cpu_ms(postmaster) if postmaster else None
    result = await hammer(base_url, requests, clients, conversations, seed=seed)
    result["api_cpu_ms_per_context"] = round((process_cpu_ms(process.pid) - cpu) / requests, 2)
    if pg is not None:
        result["postgres_cpu_ms_per_context"] = round((server_cpu_ms(postmaster) - pg) / requests, 2)
    return result


async def run_api_load(settings: Settings, args: argparse.Namespace) -> dict:
    # The topic each served context is recorded on, as `memory-agent migrate` creates it: without
    # it every request's record fails in the background and costs the API CPU.
    from domain.lineage import served_topic
    from runtime.kafka_topics import TopicSpec, ensure_topics
    await ensure_topics(settings, [TopicSpec(served_topic(settings), settings.kafka.partitions, {})])
    results: dict = {"round_trips_per_context": {"this": await count_round_trips(settings, args, None)}}
    if args.baseline is not None:
        results["round_trips_per_context"]["baseline"] = await count_round_trips(settings, args, args.baseline)
    postmaster = await postmaster_pid(settings) if args.server_cpu else None
    process, base_url = await started_api(settings, args, profile=args.profile_api)
    baseline = None if args.baseline is None else await started_api(settings, args, args.baseline)
    try:
        if baseline is not None:  # both trees, one after the other, round by round: same load, same data
            rounds: dict = {"this": [], "baseline": []}
            for r in range(args.baseline_rounds):
                for name, (proc, url) in (("baseline", baseline), ("this", (process, base_url))):
                    if args.cached_queries:  # the same questions once before: the pass embeds none of them
                        await forget_surfaced(settings)
                        await hammer(url, args.sequential, 1, args.conversations, seed=2 + r)
                    rounds[name].append(await measured(settings, proc, url, args.sequential, 1, args.conversations,
                                                       seed=2 + r, postmaster=postmaster))
            results["baseline_source"] = str(args.baseline)
            results["one_client_rounds"] = rounds
            p50 = {name: sum(p["p50_ms"] for p in passes) / len(passes) for name, passes in rounds.items()}
            for measure in ("api_cpu_ms_per_context", "postgres_cpu_ms_per_context"):
                if all(measure in p for passes in rounds.values() for p in passes):
                    cpu = {name: sum(p[measure] for p in passes) / len(passes) for name, passes in rounds.items()}
                    results[measure] = {name: round(v, 2) for name, v in cpu.items()}
                    results[measure.replace("_ms_per_context", "_ratio_this_to_baseline")] = round(
                        cpu["this"] / cpu["baseline"], 3)
            results["one_client_p50_ms"] = {name: round(v, 1) for name, v in p50.items()}
            results["same_contexts"] = await same_answers(settings, baseline[1], base_url, args.sequential,
                                                          args.conversations)
        if args.profile_api:
            process.send_signal(signal.SIGUSR1)
        results["sequential"] = await measured(settings, process, base_url, args.sequential, 1, args.conversations,
                                               seed=2, postmaster=postmaster)
        if args.profile_api:
            process.send_signal(signal.SIGUSR2)
            results["profile"] = str(args.profile_api)
        results["concurrent"] = await measured(settings, process, base_url, args.requests, args.clients,
                                               args.conversations, seed=3)
        results["healthz"] = await hammer_healthz(base_url, max(args.requests, 2000), args.clients)
        results["contexts_per_healthz"] = round(
            results["concurrent"]["throughput_rps"] / results["healthz"]["throughput_rps"], 4)
        results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        for proc in [process] + ([baseline[0]] if baseline is not None else []):
            proc.terminate()
            proc.wait(30)
    return results


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000, help="synthetic facts + chunks (besides the labelled set)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--sequential", type=int, default=200, help="requests of the one-client pass")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--users", type=int, default=1000,
                        help="spread the synthetic items over this many users (0: the labelled layout of earlier rounds)")
    parser.add_argument("--synthetic-vectors", action="store_true",
                        help="seeded random vectors for the synthetic items (no 23-minute embedding; no recall)")
    parser.add_argument("--generation", default=GENERATION, help="its schema (several sizes can be kept side by side)")
    parser.add_argument("--skip-hnsw", action="store_true",
                        help="no HNSW index at all (every scope of 10,000 users x 100 items is an exact scan)")
    parser.add_argument("--legacy-indexes", action=argparse.BooleanOptionalAction, default=None,
                        help="also build the per-table HNSW indexes that migration 0055 drops (earlier rounds' layout)")
    parser.add_argument("--api-embedding-threads", type=int, default=None,
                        help="onnxruntime intra-op threads of the API's embedder (default: the setting, 0 = cores)")
    parser.add_argument("--api-workers", type=int, default=None,
                        help="serve with `memory-agent api --workers N` (default: one uvicorn process in code)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another source tree (e.g. `git archive main | tar -x -C DIR`) served against the same"
                             " schema: one-client passes of both, alternated, with the API CPU per context of each")
    parser.add_argument("--baseline-rounds", type=int, default=3, help="alternated one-client passes per tree")
    parser.add_argument("--server-cpu", action="store_true",
                        help="also PostgreSQL's CPU per context (its postmaster's tree: a private server only)")
    parser.add_argument("--cached-queries", action="store_true",
                        help="with --baseline: each round's questions asked once unmeasured first, so the CPU per"
                             " context leaves out the query embedding (the endpoint's own work)")
    parser.add_argument("--profile-api", type=Path, default=None,
                        help="write a CPU-clock cProfile of this tree's API during the one-client pass to this file")
    parser.add_argument("--skip-recall", action="store_true", help="only the context endpoint (with --reuse)")
    parser.add_argument("--skip-api", action="store_true", help="only recall and the 1k search")
    parser.add_argument("--reuse", action="store_true", help="keep the loaded schema of a previous --keep run")
    parser.add_argument("--keep", action="store_true", help="do not drop the schema at the end")
    args = parser.parse_args()
    base = get_settings()
    settings = Settings(generation=args.generation, postgres=PostgresSettings(dsn=base.postgres.dsn, pool_max_size=10),
                        kafka=KafkaSettings(bootstrap_servers=base.kafka.bootstrap_servers,
                                            topic_prefix=TOPIC_PREFIX if args.generation == GENERATION
                                            else "bench-" + args.generation.replace("_", "-")),
                        state_dir=base.state_dir, embedding=base.embedding, retrieval=base.retrieval)
    print(f"machine: {machine()}\ncommand: {' '.join(sys.argv)}", flush=True)
    results: dict = {"n": args.n}
    if not args.reuse:
        legacy = bool(args.legacy_indexes)
        results["load"] = await load(settings, args.n, args.conversations, users=args.users,
                                     synthetic_vectors=args.synthetic_vectors,
                                     legacy_indexes=legacy and not args.skip_hnsw, hnsw=not args.skip_hnsw)
    if not args.skip_recall:
        results["recall@10"] = await recall_per_method(settings)
        results["search_1k_memories"] = await search_1k(settings)
        results["vector_step_recall_per_scope"] = await scope_recall(settings, args.users)
    if not args.skip_api:
        results["context_endpoint"] = await run_api_load(settings, args)
    print(json.dumps(results, indent=2))
    if not args.keep:
        await drop_schema(settings)


async def drop_schema(settings: Settings) -> None:
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{settings.pg_schema}" CASCADE')


if __name__ == "__main__":
    asyncio.run(main())

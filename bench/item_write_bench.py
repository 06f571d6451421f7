"""What a message costs PostgreSQL to write, with and without the per-table HNSW index that
migration 0055 drops (message_embeddings_embedding): the messages projector's and the message
index projector's statements (their rows reach memory_items through its triggers), in two
schemas side by side, batch by batch alternated, so both see the same load.

    python -m bench.item_write_bench [--base 10000] [--messages 2000] [--batch 50]
    python -m bench.item_write_bench --bulk 20000     # a batch replay's load: index kept vs built at the end

(from the repo root, PostgreSQL up.) The backend's CPU is read from /proc (the server must run
on this machine, as the local and shared ones do). Vectors are seeded random unit vectors.
Numbers: docs/scaling.md ("The read path").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine  # noqa: E402
from core.settings import KafkaSettings, PostgresSettings, Settings, get_settings  # noqa: E402
from projections.migrate import migrate  # noqa: E402

LEGACY = ("CREATE INDEX message_embeddings_embedding ON message_embeddings"
          " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)")
_MESSAGES = (
    "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, subject_id, role, content,"
    " occurred_at, source_partition, source_offset)"
    " SELECT 't', c, s, 'e-' || c || '-' || s, 'u' || (s %% 50), NULL, 'user', x, o, 0, s"
    " FROM unnest(%s::text[], %s::int[], %s::text[], %s::timestamptz[]) AS v(c, s, x, o)"
)
_EMBEDDINGS = (
    "INSERT INTO message_embeddings (tenant_id, conversation_id, seq, user_id, subject_id, occurred_at, embedding,"
    " embedding_model, event_id) SELECT 't', c, s, 'u' || (s %% 50), NULL, o, e::vector, 'bench', 'e-' || c || '-' || s"
    " FROM unnest(%s::text[], %s::int[], %s::timestamptz[], %s::text[]) AS v(c, s, o, e)"
)
LAYOUTS = ("index_kept", "index_deferred", "index_kept_again", "index_deferred_again")  # alternated: same load
WORDS = ("plan trip garden invoice piano recipe deadline doctor camera bicycle sister holiday budget concert"
         " kitchen report market weekend lesson flight").split()


def backend_cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def batch(start: int, size: int, rng: np.random.Generator) -> tuple[list, list]:
    now = datetime.now(UTC)
    seqs = list(range(start, start + size))
    conversations = [f"c{s // 100}" for s in seqs]
    texts = [" ".join(rng.choice(WORDS, 12)) + f" #{s}" for s in seqs]
    times = [now - timedelta(seconds=s) for s in seqs]
    vectors = rng.standard_normal((size, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    literals = ["[" + ",".join(f"{x:.6f}" for x in v) + "]" for v in vectors]
    return [conversations, seqs, texts, times], [conversations, seqs, times, literals]


async def write(conn: psycopg.AsyncConnection, messages: list, embeddings: list) -> None:
    await conn.execute(_MESSAGES, messages)
    await conn.execute(_EMBEDDINGS, embeddings)
    await conn.commit()


async def bulk(dsn: str, tag: str, n: int) -> dict:
    """A batch replay's bulk load into memory_items (through the message tables' triggers, in
    transactions of 5,000 as the batch's projectors): with memory_items' HNSW index maintained
    row by row, against dropped before the load and built once after it (DEFERRED_INDEXES)."""
    from memory_agent.batch_replay import DEFERRED_INDEXES
    name, definition = next(iter(DEFERRED_INDEXES.items()))
    results = {}
    for number, layout in enumerate(LAYOUTS):
        generation = f"x{number}{tag}"
        settings = Settings(generation=generation, postgres=PostgresSettings(dsn=dsn),
                            kafka=KafkaSettings(topic_prefix=f"bench-writes-{tag}"))
        await asyncio.to_thread(migrate, settings)
        async with await psycopg.AsyncConnection.connect(
                dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
            rng = np.random.default_rng(3)
            rows = [batch(start, 5000, rng) for start in range(0, n, 5000)]
            pid, started = conn.info.backend_pid, time.perf_counter()
            cpu = backend_cpu_ms(pid)
            if "deferred" in layout:
                await conn.execute(f"DROP INDEX {name}")
            for messages, embeddings in rows:
                await write(conn, messages, embeddings)
            if "deferred" in layout:
                await conn.execute("SET maintenance_work_mem = '512MB'")
                await conn.execute(f"CREATE INDEX {name} ON {definition}")
                await conn.commit()
            results[layout] = {"seconds": round(time.perf_counter() - started, 2),
                               "postgres_cpu_s": round((backend_cpu_ms(pid) - cpu) / 1000, 2)}
    kept = results["index_kept"]["seconds"] + results["index_kept_again"]["seconds"]
    deferred = results["index_deferred"]["seconds"] + results["index_deferred_again"]["seconds"]
    results["time_ratio_deferred_to_kept"] = round(deferred / kept, 3)
    return results


async def drop_generations(dsn: str, generations: list[str], topic_prefix: str) -> None:
    """Drop a bench's throwaway generations' schemas and their rows in memory_generations."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for generation in generations:
            await conn.execute(f'DROP SCHEMA IF EXISTS "gen_{generation}" CASCADE')
        await conn.execute("DELETE FROM public.memory_generations WHERE topic_prefix = %s", (topic_prefix,))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", type=int, default=10_000, help="messages in each schema before measuring")
    parser.add_argument("--messages", type=int, default=2_000, help="messages measured per schema")
    parser.add_argument("--batch", type=int, default=50, help="messages per transaction (a projector batch)")
    parser.add_argument("--bulk", type=int, default=0, help="messages of a bulk load (batch replay) instead")
    args = parser.parse_args()
    print(f"machine: {machine()}\ncommand: {' '.join(sys.argv)}", flush=True)
    base = get_settings()
    tag = uuid.uuid4().hex[:6]
    if args.bulk:
        try:
            results = await bulk(base.postgres.dsn, tag, args.bulk)
            results["load_average"] = [round(x, 2) for x in os.getloadavg()]
            print(json.dumps(results, indent=2))
        finally:
            await drop_generations(base.postgres.dsn, [f"x{number}{tag}" for number in range(len(LAYOUTS))],
                                   f"bench-writes-{tag}")
        return
    layouts = {"with_table_hnsw": f"w{tag}", "without (0055)": f"n{tag}"}
    conns: dict[str, psycopg.AsyncConnection] = {}
    cpu = {name: 0.0 for name in layouts}
    wall = {name: 0.0 for name in layouts}
    try:
        for name, generation in layouts.items():
            settings = Settings(generation=generation, postgres=PostgresSettings(dsn=base.postgres.dsn),
                                kafka=KafkaSettings(topic_prefix=f"bench-writes-{tag}"))  # its own deployment
            await asyncio.to_thread(migrate, settings)
            conn = await psycopg.AsyncConnection.connect(
                base.postgres.dsn, options=f"-c search_path={settings.pg_schema},public")
            conns[name] = conn
            rng = np.random.default_rng(1)
            for start in range(0, args.base, 1000):
                await write(conn, *batch(start, min(1000, args.base - start), rng))
            if name == "with_table_hnsw":
                await conn.execute(LEGACY)
                await conn.commit()
        pids = {name: conn.info.backend_pid for name, conn in conns.items()}
        rngs = {name: np.random.default_rng(2) for name in layouts}
        for start in range(args.base, args.base + args.messages, args.batch):
            for name, conn in conns.items():
                rows = batch(start, args.batch, rngs[name])
                cpu0, wall0 = backend_cpu_ms(pids[name]), time.perf_counter()
                await write(conn, *rows)
                cpu[name] += backend_cpu_ms(pids[name]) - cpu0
                wall[name] += time.perf_counter() - wall0
        results = {name: {"postgres_cpu_ms_per_message": round(cpu[name] / args.messages, 3),
                          "wall_ms_per_message": round(wall[name] * 1000 / args.messages, 3)} for name in layouts}
        results["cpu_ratio_without_to_with"] = round(cpu["without (0055)"] / cpu["with_table_hnsw"], 3)
        results["load_average"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(results, indent=2))
    finally:
        for conn in conns.values():
            await conn.close()
        await drop_generations(base.postgres.dsn, list(layouts.values()), f"bench-writes-{tag}")


if __name__ == "__main__":
    asyncio.run(main())

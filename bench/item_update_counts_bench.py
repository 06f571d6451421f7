"""What memory_items' UPDATE trigger costs PostgreSQL when a batch replay's message index sets the
vectors of messages already copied: migration 0020's `memory_items_updated` (every updated row's
old and new tsvector unnested, +1 and -1 summed to nothing) against 0071's (only rows whose counted
columns changed: the old and new rows summed per key and counted columns). Two schemas migrated
alike, one given 0020's function back; in each, N messages are inserted in transactions of 5,000 (the batch's projector transactions), then their
embeddings (statements of EMBED_BATCH rows, as the message index projector's); the embeddings'
statements are timed, schema by schema alternated, twice each.

    python -m bench.item_update_counts_bench [--messages 20000]

(from the repo root, PostgreSQL up, on this machine: the backend's CPU is read from /proc.)
Numbers: docs/scaling.md (replay12).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
import uuid
from importlib import resources
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine  # noqa: E402
from bench.item_write_bench import _EMBEDDINGS, _MESSAGES, backend_cpu_ms, batch, drop_generations  # noqa: E402
from core.settings import KafkaSettings, PostgresSettings, Settings, get_settings  # noqa: E402
from projections.message_index import EMBED_BATCH  # noqa: E402
from projections.migrate import migrate  # noqa: E402

LAYOUTS = ("0020", "0071", "0020_again", "0071_again")  # alternated: same load


def trigger_0020() -> str:
    """0020's memory_items_updated, as that migration creates it."""
    text = resources.files("projections.migrations").joinpath("0020_memory_items.sql").read_text()
    body = re.search(r"CREATE FUNCTION memory_items_updated\(\).*?END \$\$;", text, re.S)
    assert body, "0020's memory_items_updated not found"
    return body.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


async def run(dsn: str, tag: str, n: int) -> dict:
    results = {}
    for number, layout in enumerate(LAYOUTS):
        settings = Settings(generation=f"u{number}{tag}", postgres=PostgresSettings(dsn=dsn),
                            kafka=KafkaSettings(topic_prefix=f"bench-updates-{tag}"))
        await asyncio.to_thread(migrate, settings)
        async with await psycopg.AsyncConnection.connect(
                dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
            if layout.startswith("0020"):
                await conn.execute(trigger_0020())
            await conn.execute("DROP INDEX memory_items_embedding")  # as a batch replay loads
            await conn.commit()
            rng = np.random.default_rng(3)
            rows = [batch(start, 5000, rng) for start in range(0, n, 5000)]
            for messages, _ in rows:
                await conn.execute(_MESSAGES, messages)
                await conn.commit()
            pid, started = conn.info.backend_pid, time.perf_counter()
            cpu = backend_cpu_ms(pid)
            for _, embeddings in rows:
                for start in range(0, len(embeddings[0]), EMBED_BATCH):  # the projector's statements
                    await conn.execute(_EMBEDDINGS, [column[start:start + EMBED_BATCH] for column in embeddings])
                await conn.commit()
            results[layout] = {"seconds": round(time.perf_counter() - started, 2),
                               "postgres_cpu_s": round((backend_cpu_ms(pid) - cpu) / 1000, 2)}
            counts = await (await conn.execute("SELECT count(*), sum(df) FROM memory_lexicon")).fetchone()
            results[layout]["lexicon_rows_and_df"] = list(counts)
    old = results["0020"]["postgres_cpu_s"] + results["0020_again"]["postgres_cpu_s"]
    new = results["0071"]["postgres_cpu_s"] + results["0071_again"]["postgres_cpu_s"]
    results["cpu_ratio_0071_to_0020"] = round(new / old, 3)
    return results


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    print(f"machine: {machine()}\ncommand: {' '.join(sys.argv)}\nload average at start: "
          f"{[round(x, 2) for x in os.getloadavg()]}", flush=True)
    base = get_settings()
    tag = uuid.uuid4().hex[:6]
    try:
        results = await run(base.postgres.dsn, tag, args.messages)
        results["load_average"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(results, indent=2))
    finally:
        await drop_generations(base.postgres.dsn, [f"u{number}{tag}" for number in range(len(LAYOUTS))],
                               f"bench-updates-{tag}")


if __name__ == "__main__":
    asyncio.run(main())

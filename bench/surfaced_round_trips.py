"""Round trips of the surfaced record (retrieval.search.record_surfaced), this tree against
another checkout's (e.g. main's from `git archive`), through the retrieval bench's counting proxy.

    python -m bench.surfaced_round_trips --baseline /tmp/main-copy [--schema gen_bench_r10k]
(from the repo root, against a schema the retrieval bench loaded and kept: `--keep`.)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file, not installed

from bench.retrieval_bench import RoundTripProxy  # noqa: E402
from core.settings import get_settings  # noqa: E402
from retrieval.search import Scope, record_surfaced  # noqa: E402


def baseline_search(source: Path):
    spec = importlib.util.spec_from_file_location("baseline_search", source / "retrieval" / "search.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_search"] = module
    spec.loader.exec_module(module)
    return module


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout (its retrieval/search.py)")
    parser.add_argument("--schema", default="gen_bench_r10k")
    args = parser.parse_args()
    theirs = baseline_search(args.baseline)
    info = psycopg.conninfo.conninfo_to_dict(get_settings().postgres.dsn)
    proxy = RoundTripProxy(info.get("host") or "127.0.0.1", int(info.get("port") or 5432))
    dsn = psycopg.conninfo.make_conninfo(get_settings().postgres.dsn, host="127.0.0.1", port=await proxy.start())
    async with await psycopg.AsyncConnection.connect(dsn, options=f"-c search_path={args.schema},public") as conn:
        facts = await (await conn.execute("SELECT tenant_id, fact_id FROM facts ORDER BY fact_id LIMIT 6")).fetchall()
        chunks = [r[0] for r in await (await conn.execute("SELECT chunk_id FROM conversation_chunks LIMIT 3")).fetchall()]
        await conn.commit()
        for name, n in (("baseline", 0), ("this", 1), ("baseline", 2), ("this", 3)):
            scope = Scope(facts[0][0], "u", None, f"trips-{name}-{n}")
            items = [("fact", f) for _, f in facts[n:n + 3]] + [("chunk", c) for c in chunks]
            for turn in (1, 2):  # new to the conversation (facts' access bumped), then shown again
                before = proxy.trips  # as in a context: the read's transaction has ended
                if name == "baseline":
                    await theirs.record_surfaced(conn, scope, items, datetime.now(UTC), turn)
                    await conn.commit()
                else:
                    await record_surfaced(conn, scope, items, datetime.now(UTC), turn, commit=True)
                print(f"{name}: turn {turn}: {proxy.trips - before} round trips", flush=True)
        rows = await (await conn.execute(
            "SELECT conversation_id, count(*), min(surfaced_seq), max(previous_seq) FROM surfaced_items"
            " WHERE conversation_id LIKE 'trips-%%' GROUP BY 1 ORDER BY 1")).fetchall()
        print("rows per conversation (id, rows, surfaced_seq, previous_seq):", rows)
        await conn.execute("DELETE FROM surfaced_items WHERE conversation_id LIKE 'trips-%%'")
        await conn.commit()
    await proxy.stop()


if __name__ == "__main__":
    asyncio.run(main())

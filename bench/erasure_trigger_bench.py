"""What the erasure tombstones and the projection clock cost the projectors (docs/lineage.md):
inserting summary rows (`memory`: the clock default and status-position trigger; the
tombstone trigger, present once the generation applied an erasure) with and without a
tombstone for the conversation, and message rows with and without the clock default; and the clock read the context endpoint
makes per served context (one round trip, 200 reads).

    python -m bench.erasure_trigger_bench [--rows 5000] [--erased 10]

Set-based inserts (INSERT ... SELECT generate_series), so the figure is PostgreSQL's work per
row, not round trips. Best of 7 runs; the machine may be shared (best-of is the figure to
trust). Uses a throwaway generation schema, dropped at the end."""

from __future__ import annotations

import argparse
import platform
import time

import psycopg

from bench.common import bench_settings
from projections.migrate import migrate

_MEMORY = ("INSERT INTO memory (tenant_id, conversation_id, memory_id, start_sequence, end_sequence, attempt,"
           " prompt_version, model, request_event_id, status, memory_text, source_event_ids, completed_at)"
           " SELECT 't', %s, g, g, g, 1, 'p', 'm', 'e' || g, 'completed', 'text', ARRAY['a' || g], now()"
           " FROM generate_series(1, %s) g")
_MESSAGES = ("INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, occurred_at,"
             " source_partition, source_offset{pos}) SELECT 't', %s, g, %s || g, 'u', 'user', 'hello', now(), 0, g{val}"
             " FROM generate_series(0, %s - 1) g")


def best(conn: psycopg.Connection, sql: str, params_of, runs: int = 7) -> float:
    """Best wall time of `runs` inserts, each rolled back."""
    times = []
    for run in range(runs):
        with conn.transaction(force_rollback=True):
            started = time.perf_counter()
            conn.execute(sql, params_of(run))
            times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--erased", type=int, default=10, help="conversations with a tombstone")
    args = parser.parse_args()
    settings = bench_settings("erasure-trigger")
    migrate(settings)
    n = args.rows
    try:
        with psycopg.connect(settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public",
                             autocommit=True) as conn:
            conn.execute("INSERT INTO erasure_tombstones (tenant_id, conversation_id, erasure_event_id, whole,"
                         " through_seq, event_ids) VALUES ('t', 'erased', 'x', false, -1, ARRAY['nope'])")
            results = {}
            results["memory, before any erasure (clock trigger)"] = best(conn, _MEMORY, lambda r: (f"c{r}", n))
            conn.execute("CREATE TRIGGER memory_drop_erased BEFORE INSERT OR UPDATE OF status ON memory FOR EACH ROW"
                         " WHEN ((NEW.tenant_id || '/' || NEW.conversation_id) = ANY(%s::text[]))"
                         " EXECUTE FUNCTION drop_erased()" % "ARRAY[{}]".format(", ".join(
                             ["'t/erased'"] + [f"'t/other-{i}'" for i in range(args.erased - 1)])))  # as erasures do
            results["memory, after an erasure, other conversation"] = best(conn, _MEMORY, lambda r: (f"c{r}", n))
            results["memory, after an erasure, its conversation"] = best(conn, _MEMORY, lambda r: ("erased", n))
            conn.execute("ALTER TABLE memory DISABLE TRIGGER USER")
            results["memory, no trigger at all"] = best(conn, _MEMORY, lambda r: (f"c{r}", n))
            conn.execute("ALTER TABLE memory ENABLE TRIGGER USER")
            results["messages, clock default"] = best(conn, _MESSAGES.format(pos="", val=""),
                                                      lambda r: (f"c{r}", f"e{r}-", n))
            results["messages, constant position"] = best(conn, _MESSAGES.format(pos=", projected_pos", val=", 0"),
                                                          lambda r: (f"c{r}", f"e{r}-", n))
            # What the context endpoint adds per served context: reading the clock (one round trip).
            reads = []
            for _ in range(200):
                started = time.perf_counter()
                conn.execute("SELECT current_schema(), to_regclass('projection_clock') IS NOT NULL,"
                             " COALESCE(pg_sequence_last_value(to_regclass('projection_clock')), 0)").fetchone()
                reads.append(time.perf_counter() - started)
            reads.sort()
            clock_read = (reads[0], reads[len(reads) // 2])
    finally:
        with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{settings.pg_schema}" CASCADE')
            conn.execute("DELETE FROM public.memory_generations WHERE topic_prefix = %s",
                         (settings.kafka.topic_prefix,))
    print(f"{n} rows per insert, {args.erased} conversations with a tombstone, best of 7; {platform.platform()}")
    for name, seconds in results.items():
        print(f"  {name:52s} {seconds * 1e6 / n:7.2f} µs/row")
    print(f"  projection clock read (a served context)            best {clock_read[0] * 1e6:.0f} µs,"
          f" median {clock_read[1] * 1e6:.0f} µs")


if __name__ == "__main__":
    main()

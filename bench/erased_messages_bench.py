"""What the erasure check costs the messages projector (docs/lineage.md, "Messages reached after
the erasure"): the one query per batch that finds the applied erasures covering its messages,
alone and inside a whole `apply` of the batch (rows, conversations), with no erasure applied,
with many erasures of other users, and with a batch every message of which is dropped.

    python -m bench.erased_messages_bench [--erasures 1000]

Each apply runs in a transaction rolled back afterwards. Best of 9 per figure; the machine may
be shared (best-of is the figure to trust). Uses a throwaway generation schema, dropped at the end."""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime

import psycopg
from aiokafka.structs import ConsumerRecord

from bench.common import bench_settings, drop, machine
from projections.erased_messages import erased_messages
from projections.messages import MessagesProjector
from projections.migrate import migrate
from schemas.codec import encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED

NOW_MS = int(time.time() * 1000)


def batch(size: int, user: str) -> list[ConsumerRecord]:
    """`size` messages of `user` in 20 conversations, appended a minute before now."""
    out = []
    for i in range(size):
        envelope = new_event(MESSAGE_APPENDED, MessageAppended(role="user", content=f"hello {i}", metadata={}),
                             tenant_id="t", conversation_id=f"{user}-c{i % 20}", user_id=user, seq=i // 20,
                             occurred_at=datetime.now(UTC))
        value, key = encode(envelope), envelope.key
        out.append(ConsumerRecord("conv", 1, i, NOW_MS - 60_000, 0, key, value, None, len(value), len(key), []))
    return out


async def best(conn, work, runs: int = 9) -> float:
    times = []
    for _ in range(runs):
        async with conn.transaction(force_rollback=True):
            started = time.perf_counter()
            await work()
            times.append(time.perf_counter() - started)
    return min(times)


async def measure(settings, erasures: int) -> dict[str, float]:
    projector = MessagesProjector(settings)
    results = {}
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True) as conn:
        async def scenario(label: str) -> None:
            for size in (1, 500):
                records = batch(size, "alice")
                decoded = {(e.envelope.tenant_id, e.envelope.conversation_id, e.envelope.seq):
                           (e.envelope.tenant_id, e.envelope.conversation_id, e.envelope.user_id, r)
                           for r, e in ((r, projector.decode(r)) for r in records)}
                results[f"{label}, check alone, batch of {size}"] = await best(
                    conn, lambda: erased_messages(conn, decoded))
                results[f"{label}, whole apply, batch of {size}"] = await best(
                    conn, lambda: projector.apply(conn, records))

        await scenario("no erasure applied")
        await conn.execute(
            "INSERT INTO erasures (event_id, tenant_id, kind, erased_user_id, conversation_ids, requested_by,"
            " requested_at, log_partition, log_offset, logged_at) SELECT 'e' || g, 't', 'user', 'other-' || g,"
            " ARRAY['other-' || g || '-c'], 'x', now(), 0, g, now() FROM generate_series(1, %s) g", (erasures,))
        await conn.execute("ANALYZE erasures")
        await scenario(f"{erasures} erasures of other users")
        await conn.execute(
            "INSERT INTO erasures (event_id, tenant_id, kind, erased_user_id, requested_by, requested_at,"
            " log_partition, log_offset, logged_at) VALUES ('mine', 't', 'user', 'alice', 'x', now(), 3, 0, now())")
        await scenario("alice erased: every message dropped")
    return results


async def run(settings, erasures: int) -> dict[str, float]:
    await asyncio.to_thread(migrate, settings)
    try:
        return await measure(settings, erasures)
    finally:
        await drop(settings)
        async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
            await conn.execute("DELETE FROM public.memory_generations WHERE topic_prefix = %s",
                               (settings.kafka.topic_prefix,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--erasures", type=int, default=1000)
    args = parser.parse_args()
    print(f"best of 9, per batch; {machine()}")
    for name, seconds in asyncio.run(run(bench_settings("erased-messages"), args.erasures)).items():
        print(f"  {name:62s} {seconds * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()

"""What the topic fold's erasure check costs per message (docs/topics.md, "Erased messages"):
`ErasedCheck.erasure_of` as the fold runs it for every user or assistant message (one
`count(*)` probe on its own connection, the in-memory snapshot deciding), against the query per
message it replaced (`applied_erasures` through a pool); with no erasure applied, with
`--erasures` of other users, and the message's own user erased (the check must say so).

    python -m bench.topic_erased_check_bench [--checks 1000] [--erasures 100]

Uses a throwaway generation schema, dropped at the end. The machine may be shared: say its load."""

from __future__ import annotations

import argparse
import asyncio
import time
from types import SimpleNamespace

from bench.common import bench_settings, drop, machine
from domain.erasure import erased_by
from runtime.db import make_pool
from projections.erased_messages import applied_erasures
from projections.erasure_reads import PostgresErasureReads
from projections.migrate import migrate
from schemas.codec import decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.topics_memory.erased import ErasedCheck, position


class QueryPerMessage:
    """The check before this change: one `applied_erasures` query per message, through a pool."""

    def __init__(self, pool) -> None:
        self.pool = pool

    async def erasure_of(self, event, record):
        e = event.envelope
        async with self.pool.connection() as conn:
            erasures = await applied_erasures(conn, [(e.tenant_id, e.conversation_id, e.user_id, record)])
        return erased_by(erasures, e.tenant_id, e.conversation_id, e.user_id, position(record)) if erasures else None


async def timed(check, count: int, expect) -> tuple[float, float]:
    event = decode(encode(new_event(MESSAGE_APPENDED, MessageAppended(role="user", content="hello"), tenant_id="t",
                                    conversation_id="c", user_id="u", seq=1)))
    record = SimpleNamespace(partition=0, offset=5, timestamp=time.time() - 60)  # a faust message: seconds
    for _ in range(50):
        await check.erasure_of(event, record)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        assert await check.erasure_of(event, record) == expect
    return (time.perf_counter() - wall) / count * 1000, (time.process_time() - cpu) / count * 1000


async def main(checks: int, erasures: int) -> None:
    settings = bench_settings("topic-erased-check")
    print(machine())
    await asyncio.to_thread(migrate, settings)
    try:
        async with make_pool(settings, schema=settings.pg_schema) as pool:
            check = ErasedCheck(PostgresErasureReads(settings))
            before = QueryPerMessage(pool)

            async def both(label: str, expect) -> None:
                for name, c in (("query per message (before)", before), ("count probe + snapshot", check)):
                    wall, cpu = await timed(c, checks, expect)
                    print(f"{label}, {name}: {wall:.3f} ms wall, {cpu:.3f} CPU-ms (this process) per check")

            await both("no erasure applied", None)
            async with pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO erasures (event_id, tenant_id, kind, erased_user_id, conversation_ids, requested_by,"
                    " requested_at) SELECT 'e' || i, 't', 'user', 'other-' || i, ARRAY['x' || i], 'bench', now()"
                    " FROM generate_series(1, %s) i",
                    (erasures,))
            await both(f"{erasures} erasures of other users", None)
            async with pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO erasures (event_id, tenant_id, kind, erased_user_id, conversation_ids, requested_by,"
                    " requested_at) VALUES ('mine', 't', 'user', 'u', ARRAY['c'], 'bench', now())")
            await both("the message's user erased", "mine")
            print(f"{checks} checks per line; the snapshot was read {check.reloads} times")
            await check.close()
    finally:
        await drop(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checks", type=int, default=1000)
    parser.add_argument("--erasures", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.checks, args.erasures))

"""What the topic fold's erasure check costs per message (docs/topics.md, "Erased messages"):
`ErasedCheck.erasure_of`, one query on `erasures` through a pool, as the fold runs it for every
user or assistant message; with no erasure applied and with `--erasures` of other users.

    python -m bench.topic_erased_check_bench [--checks 1000] [--erasures 100]

Uses a throwaway generation schema, dropped at the end. The machine may be shared: say its load."""

from __future__ import annotations

import argparse
import asyncio
import time
from types import SimpleNamespace

from bench.common import bench_settings, drop, machine
from projections.db import make_pool
from projections.migrate import migrate
from schemas.codec import decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from streams.topics_memory.erased import ErasedCheck


async def timed(check: ErasedCheck, count: int) -> tuple[float, float]:
    event = decode(encode(new_event(MESSAGE_APPENDED, MessageAppended(role="user", content="hello"), tenant_id="t",
                                    conversation_id="c", user_id="u", seq=1)))
    record = SimpleNamespace(partition=0, offset=5, timestamp=time.time())  # a faust message: seconds
    for _ in range(50):
        await check.erasure_of(event, record)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        assert await check.erasure_of(event, record) is None
    return (time.perf_counter() - wall) / count * 1000, (time.process_time() - cpu) / count * 1000


async def main(checks: int, erasures: int) -> None:
    settings = bench_settings("topic-erased-check")
    print(machine())
    await asyncio.to_thread(migrate, settings)
    try:
        async with make_pool(settings, schema=settings.pg_schema) as pool:
            check = ErasedCheck(pool)
            wall, cpu = await timed(check, checks)
            print(f"no erasure applied: {wall:.3f} ms wall, {cpu:.3f} CPU-ms (this process) per check, {checks} checks")
            async with pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO erasures (event_id, tenant_id, kind, erased_user_id, conversation_ids, requested_by,"
                    " requested_at) SELECT 'e' || i, 't', 'user', 'other-' || i, ARRAY['x' || i], 'bench', now()"
                    " FROM generate_series(1, %s) i",
                    (erasures,))
            wall, cpu = await timed(check, checks)
            print(f"{erasures} erasures of other users: {wall:.3f} ms wall, {cpu:.3f} CPU-ms per check")
    finally:
        await drop(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checks", type=int, default=1000)
    parser.add_argument("--erasures", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.checks, args.erasures))

"""Backbone benchmark: projection throughput to rows, and produce->readable latency at a fixed rate.

    python -m bench.backbone_bench --messages 100000 --conversations 1000 --rate 1000 --duration 30

Uses the Kafka and PostgreSQL named by MEMORY_KAFKA__BOOTSTRAP_SERVERS / MEMORY_POSTGRES__DSN
(defaults: the local launchers), with a unique topic prefix and schema; the projectors run as
`memory-agent worker --projectors-only` in their own process, as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.common import Clock, bench_settings, drop, percentile, prepare, report, scalar, worker
from runtime.client import MemoryClient


async def produce(
    client: MemoryClient, messages: int, conversations: int, *, rate: float = 0.0, seq_base: dict, salt: str = "",
) -> float:
    """Send `messages` round-robin over `conversations`; paced at `rate`/s when > 0. Returns seconds.
    `salt` goes into every message (the LLM cache is shared: a run that must start cold needs its own text)."""
    clock = Clock()
    pending = []
    for i in range(messages):
        conversation = f"c{i % conversations}"
        seq = seq_base.get(conversation, 0)
        seq_base[conversation] = seq + 1
        envelope = client.message_event(
            tenant_id="bench", conversation_id=conversation, user_id=f"u{i % conversations}", seq=seq,
            role="user" if seq % 2 == 0 else "assistant",
            content=f"message {seq} of {conversation}{salt}: a sentence of ordinary chat length about the project plan.",
            metadata={"sent_at": time.time()},
        )
        pending.append(await client.enqueue(envelope))
        if len(pending) >= 1000:
            await asyncio.gather(*pending)
            pending.clear()
        if rate > 0:
            ahead = (i + 1) / rate - clock.elapsed()
            if ahead > 0:
                await asyncio.sleep(ahead)
    await asyncio.gather(*pending)
    return clock.elapsed()


async def wait_for_rows(settings, expected: int, timeout: float) -> float:
    clock = Clock()
    while clock.elapsed() < timeout:
        if await scalar(settings, "SELECT count(*) FROM messages") >= expected:
            return clock.elapsed()
        await asyncio.sleep(0.1)
    raise TimeoutError(f"only {await scalar(settings, 'SELECT count(*) FROM messages')} of {expected} rows")


async def throughput(messages: int, conversations: int) -> dict:
    """Backlog of `messages`, then the projector process starts: rows/s from first to last row."""
    settings = bench_settings("throughput")
    await prepare(settings)
    try:
        async with MemoryClient(settings, linger_ms=20) as client:
            produce_s = await produce(client, messages, conversations, seq_base={})
        async with worker(settings, "--projectors-only"):
            while not await scalar(settings, "SELECT count(*) FROM messages"):
                await asyncio.sleep(0.05)
            elapsed = await wait_for_rows(settings, messages, timeout=600)
        span = await scalar(
            settings, "SELECT extract(epoch FROM max(projected_at) - min(projected_at)) FROM messages"
        )
        return {
            "messages": messages,
            "conversations": conversations,
            "produce_msgs_per_s": round(messages / produce_s),
            "projected_rows_per_s": round(messages / float(span)),
            "first_to_last_row_s": round(float(span), 2),
            "wall_s_after_first_row": round(elapsed, 2),
        }
    finally:
        await drop(settings)


async def latency(rate: float, duration: float, conversations: int) -> dict:
    """Paced production; latency = projected_at (row insert, clock_timestamp) - sent_at."""
    settings = bench_settings("latency")
    await prepare(settings)
    messages = int(rate * duration)
    try:
        async with worker(settings, "--projectors-only"), MemoryClient(settings, linger_ms=0) as client:
            seq_base: dict = {}
            await produce(client, 50, conversations, seq_base=seq_base)  # the worker is up and assigned
            await wait_for_rows(settings, 50, timeout=120)
            produce_s = await produce(client, messages, conversations, rate=rate, seq_base=seq_base)
            await wait_for_rows(settings, messages + 50, timeout=300)
        lags = await _latencies(settings, skip_first=50)
        return {
            "target_rate_per_s": rate,
            "achieved_rate_per_s": round(messages / produce_s),
            "messages": messages,
            "p50_ms": round(percentile(lags, 50), 1),
            "p99_ms": round(percentile(lags, 99), 1),
            "max_ms": round(max(lags), 1),
        }
    finally:
        await drop(settings)


async def _latencies(settings, skip_first: int) -> list[float]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        rows = await (await conn.execute(
            "SELECT (extract(epoch FROM projected_at) - (metadata->>'sent_at')::float8) * 1000 FROM messages"
            " ORDER BY (metadata->>'sent_at')::float8 OFFSET %s", (skip_first,)
        )).fetchall()
    return [float(r[0]) for r in rows]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--duration", type=float, default=30.0)
    args = parser.parse_args()
    results = {
        "throughput": await throughput(args.messages, args.conversations),
        "latency": await latency(args.rate, args.duration, args.conversations),
    }
    report("backbone benchmark", results)


if __name__ == "__main__":
    asyncio.run(main())

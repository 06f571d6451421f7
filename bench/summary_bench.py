"""Summary benchmark: many conversations talking at once with a fixed-latency LLM.

    python -m bench.summary_bench --conversations 200 --round-period 0.4 --duration 60 --llm-latency 0.3

Measures, with the sliding-window agent running against an OpenAI-compatible server that
answers after a fixed latency: message freshness (produce -> projected row) and throughput,
and summary lag = completed_at of a summary - send time of the message that ends its window.
Only the window system's agents run (MEMORY_SYSTEMS=["window"]) so the numbers are its own.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time

import psycopg

from bench.common import Clock, bench_settings, drop, percentile, prepare, report, scalar, worker
from runtime.client import MemoryClient
from tests.support.fake_openai import FakeOpenAI


async def converse(
    client: MemoryClient, conversations: int, period: float, duration: float, first_round: int = 0,
    *, synchronized: bool = False,
) -> tuple[int, int]:
    """Every conversation sends a round (user, then assistant 50 ms later) every `period` s.

    Conversations are spread evenly over the period (conversation c starts c/n of a period
    late), as independent users are; `synchronized` sends every conversation's round at the
    same instant instead (bursts of n messages: a harsher, less realistic load)."""
    clock = Clock()
    rounds = max(1, math.ceil(duration / period))
    counts = await asyncio.gather(*(
        _talk(client, c, 0.0 if synchronized else period * c / conversations, period, rounds, first_round, clock)
        for c in range(conversations)
    ))
    return sum(counts), first_round + rounds


async def _talk(client: MemoryClient, c: int, phase: float, period: float, rounds: int, first_round: int,
                clock: Clock) -> int:
    sent = 0
    for r in range(rounds):
        ahead = phase + r * period - clock.elapsed()
        if ahead > 0:
            await asyncio.sleep(ahead)
        round_no = first_round + r
        for role_index in (0, 1):
            seq = 2 * round_no + role_index
            envelope = client.message_event(
                tenant_id="bench", conversation_id=f"c{c}", user_id=f"u{c}", seq=seq,
                role="user" if role_index == 0 else "assistant",
                content=f"Round {round_no + 1} of conversation {c} ({client.settings.kafka.topic_prefix}):"
                        f" we talk about decision {seq} and its reasons.",
                metadata={"sent_at": time.time()},
            )
            await (await client.enqueue(envelope))
            sent += 1
            if role_index == 0:
                await asyncio.sleep(0.05)
    return sent


async def run(
    conversations: int, period: float, duration: float, llm_latency: float, concurrency: int, synchronized: bool,
    processes: int = 1,
) -> dict:
    settings = bench_settings("summary")
    await prepare(settings)
    try:
        with FakeOpenAI(latency_s=llm_latency) as fake:
            env = fake.env() | {
                "MEMORY_SYSTEMS": '["window"]',
                "MEMORY_LLM__CONCURRENCY": str(concurrency),
                "MEMORY_POSTGRES__POOL_MAX_SIZE": "20",
            }
            async with worker(settings, extra_env=env, processes=processes), MemoryClient(settings, linger_ms=2) as client:
                # Warm-up: three rounds (seq 0-5) trigger the first summaries, so the worker is
                # assigned and the LLM path is hot before measuring.
                _, next_round = await converse(client, conversations, 1.0, 2.5)
                while (await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'completed'")) < 1:
                    await asyncio.sleep(0.2)
                started = time.time()
                clock = Clock()
                sent, _ = await converse(client, conversations, period, duration, first_round=next_round,
                                         synchronized=synchronized)
                produce_s = clock.elapsed()
                await asyncio.sleep(llm_latency + 5)  # let the last summaries finish
            calls = len(fake.chat_requests)
        return {
            "conversations": conversations,
            "round_period_s": period,
            "rounds": "synchronized" if synchronized else "spread over the period",
            "worker_processes": processes,
            "llm_latency_s": llm_latency,
            "llm_concurrency": concurrency,
            "messages": sent,
            "achieved_msgs_per_s": round(sent / produce_s),
            "llm_calls": calls,
            **await _freshness(settings, started),
            **await _summary_lag(settings, started),
        }
    finally:
        await drop(settings)


async def _rows(settings, sql: str, params=()) -> list[tuple]:
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        return await (await conn.execute(sql, params)).fetchall()


async def _freshness(settings, started: float) -> dict:
    rows = await _rows(
        settings,
        "SELECT (extract(epoch FROM projected_at) - (metadata->>'sent_at')::float8) * 1000 FROM messages"
        " WHERE (metadata->>'sent_at')::float8 >= %s",
        (started,),
    )
    lags = [float(r[0]) for r in rows]
    return {"message_freshness_p50_ms": round(percentile(lags, 50), 1), "message_freshness_p99_ms": round(percentile(lags, 99), 1)}


async def _summary_lag(settings, started: float) -> dict:
    rows = await _rows(
        settings,
        "SELECT (extract(epoch FROM m.completed_at) - (msg.metadata->>'sent_at')::float8) * 1000, m.generation_time_ms,"
        " (extract(epoch FROM m.created_at) - (msg.metadata->>'sent_at')::float8) * 1000"
        " FROM memory m JOIN messages msg ON msg.tenant_id = m.tenant_id AND msg.conversation_id = m.conversation_id"
        " AND msg.seq = m.end_sequence WHERE m.status = 'completed' AND (msg.metadata->>'sent_at')::float8 >= %s",
        (started,),
    )
    lags = [float(r[0]) for r in rows]
    generation = [float(r[1]) for r in rows]
    requested = [float(r[2]) for r in rows]
    failed = await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'failed'")
    return {
        "summaries_completed": len(lags),
        "summaries_failed": failed,
        "summary_lag_p50_ms": round(percentile(lags, 50), 1),
        "summary_lag_p99_ms": round(percentile(lags, 99), 1),
        "generation_time_p50_ms": round(percentile(generation, 50), 1),
        # message sent -> its summary request projected as a 'processing' row (fold + hops)
        "request_lag_p50_ms": round(percentile(requested, 50), 1),
        "request_lag_p99_ms": round(percentile(requested, 99), 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--round-period", type=float, default=0.4, help="seconds between a conversation's rounds")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--llm-latency", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, default=200, help="summary stage concurrency")
    parser.add_argument("--synchronized", action="store_true", help="every conversation's round at the same instant")
    parser.add_argument("--workers", type=int, default=1, help="worker processes sharing the generation")
    args = parser.parse_args()
    results = await run(args.conversations, args.round_period, args.duration, args.llm_latency, args.concurrency,
                        args.synchronized, args.workers)
    report("summary benchmark", results)


if __name__ == "__main__":
    asyncio.run(main())

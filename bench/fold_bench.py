"""Ordered fold benchmark: how fast one worker folds a backlog of conversation events.

    python -m bench.fold_bench --messages 20000 --conversations 200

Writes N messages to a fresh deployment's log, then starts `memory-agent worker` with only
the window system and an OpenAI-compatible server that answers at once (cache off), and
measures how fast the worker's consumer group commits through the conversation topic, and
how fast its messages projector writes the same backlog meanwhile.
The fold also sees its own summary requests and completions, which are counted too.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from aiokafka.admin import AIOKafkaAdminClient

from bench.backbone_bench import produce
from bench.common import bench_settings, drop, prepare, report, scalar, worker
from runtime.client import MemoryClient
from runtime.kafka_topics import agents_group
from tests.support.fake_openai import FakeOpenAI


async def committed(settings, admin: AIOKafkaAdminClient, group: str, topic: str) -> int:
    offsets = await admin.list_consumer_group_offsets(group)
    return sum(meta.offset for tp, meta in offsets.items() if tp.topic == topic and meta.offset > 0)


async def run(messages: int, conversations: int, timeout: float) -> dict:
    settings = bench_settings("fold")
    await prepare(settings)
    kafka = settings.kafka
    group = agents_group(settings)
    try:
        async with MemoryClient(settings, linger_ms=20) as client:
            await produce(client, messages, conversations, seq_base={})
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
        await admin.start()
        try:
            with FakeOpenAI(latency_s=0.0) as fake:
                env = fake.env() | {"MEMORY_SYSTEMS": '["window"]', "MEMORY_LLM__CACHE_ENABLED": "false"}
                async with worker(settings, extra_env=env):
                    started = None
                    clock = time.perf_counter()
                    deadline = clock + timeout
                    samples = []
                    projected_at = None

                    async def note_projection() -> None:
                        nonlocal projected_at
                        if projected_at is None and await scalar(settings, "SELECT count(*) FROM messages") >= messages:
                            projected_at = time.perf_counter() - clock

                    while time.perf_counter() < deadline:
                        await note_projection()
                        done = await committed(settings, admin, group, kafka.conversation_topic)
                        now = time.perf_counter()
                        if done and started is None:
                            started = (now, done)
                        if started:
                            samples.append((now, done))
                        if done >= messages:
                            break
                        await asyncio.sleep(0.5)
                    memory_done = await committed(settings, admin, group, kafka.memory_topic(settings.generation))
                    while projected_at is None and time.perf_counter() < deadline:
                        await note_projection()
                        await asyncio.sleep(0.2)
                calls = len(fake.chat_requests)
        finally:
            await admin.close()
        (t0, n0), (t1, n1) = samples[0], samples[-1]
        rate = (n1 - n0) / (t1 - t0) if t1 > t0 else float("nan")
        summaries = await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'completed'")
        return {
            "messages": messages, "conversations": conversations, "messages_folded": n1,
            "memory_events_folded": memory_done, "llm_calls": calls, "summaries_completed": summaries,
            "seconds_measured": round(t1 - t0, 1), "messages_per_s": round(rate),
            "fold_events_per_s": round(rate * (1 + memory_done / max(1, n1))),
            # The messages projector in the same worker, from the same backlog, while folds and
            # summaries run (from worker start, so it includes start-up).
            "messages_projected_in_s": round(projected_at, 1) if projected_at else None,
            "messages_projected_per_s": round(messages / projected_at) if projected_at else None,
        }
    finally:
        await drop(settings)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    report("fold benchmark", await run(args.messages, args.conversations, args.timeout))


if __name__ == "__main__":
    asyncio.run(main())

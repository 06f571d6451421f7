"""Topic agent (seed 004) costs: matching and compaction per message with the offline MiniLM model,
the archive's compression on a realistic chat, and the worker's sustained messages/s through real
Kafka + PostgreSQL.

    python bench/topic_agent_bench.py                      # offline parts + live run (needs the stack)
    python bench/topic_agent_bench.py --offline-only
    python bench/topic_agent_bench.py --conversations 20 --threshold 0.3   # default: the embedder's
    python bench/topic_agent_bench.py --live-only --conversations 3 --repeat 9   # 5,886 messages, long chats

The live run uses MEMORY_KAFKA__BOOTSTRAP_SERVERS / MEMORY_POSTGRES__DSN (default: the local stack
on 19092 / 15432), a throw-away topic prefix and schema, and removes them afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import drop_topics  # noqa: E402
from topic_compression import SEED, TOPICS, conversation  # noqa: E402

from core.embeddings import make_embedder  # noqa: E402
from core.llm.port import ChatMessage  # noqa: E402
from core.settings import Settings, TopicSettings  # noqa: E402
from schemas import topic_events as te  # noqa: E402
from schemas.codec import decode, encode, new_event  # noqa: E402
from schemas.events import MessageAppended  # noqa: E402
from schemas.registry import MESSAGE_APPENDED  # noqa: E402
from streams.topics_memory import codec  # noqa: E402
from streams.topics_memory.agent import AgentConfig, handle  # noqa: E402
from domain.topics.archive import compress_bytes, merge_messages, to_json_bytes  # noqa: E402
from streams.topics_memory.summarize import ExtractiveTopicSummarizer  # noqa: E402

T0 = 1_746_000_000.0


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"Python {platform.python_version()}, {platform.system()} {platform.machine()}, "
            f"{os.cpu_count()} cores, load average {load:.2f} at start")


def encoded(type_, payload, seq, at=T0) -> bytes:
    return encode(new_event(type_, payload, tenant_id="bench", conversation_id="chat", user_id="u", seq=seq,
                            occurred_at=datetime.fromtimestamp(at, UTC)))


async def embedding_costs(chat) -> np.ndarray:
    embedder = make_embedder(Settings())
    users = [text for _, role, text in chat if role == "user"]
    await embedder.embed_documents(users[:4])  # load + warm up
    started, cpu = time.perf_counter(), time.process_time()
    for text in users[:40]:
        await embedder.embed_documents([text])
    single, single_cpu = ((time.perf_counter() - started) / 40, (time.process_time() - cpu) / 40)
    started, cpu = time.perf_counter(), time.process_time()
    vectors = await embedder.embed_documents(users)
    batched, batched_cpu = ((time.perf_counter() - started) / len(users), (time.process_time() - cpu) / len(users))
    print(f"| embed one user message (batch of 1, {embedder.model}) | {single * 1000:.1f} ms "
          f"({single_cpu * 1000:.1f} CPU-ms) |")
    print(f"| embed one user message (batches of 32, as the stage does under load) | {batched * 1000:.1f} ms "
          f"({batched_cpu * 1000:.1f} CPU-ms) |")
    return vectors


async def agent_costs(chat, vectors, threshold: float, compare: bool) -> None:
    """The ordered agent's own work per event (decode, state load/store, inbox, fold) and
    the compaction work (offline summary + archive merge), on the realistic chat."""
    settings = Settings(topics=TopicSettings(similarity_threshold=threshold))  # the model's active-topic bonus
    summarizer = ExtractiveTopicSummarizer(settings.llm.extractive_max_chars)
    cfg = AgentConfig.from_settings(settings, model=summarizer.model, prompt_version=summarizer.prompt_version)
    raw, user_index, events = codec.dumps(codec.loads(None, "chat")), 0, []
    for seq, (_, role, text) in enumerate(chat):
        events.append(encoded(MESSAGE_APPENDED, MessageAppended(role=role, content=text), seq, T0 + 40 * seq))
        if role == "user":
            vector = [round(float(x), 7) for x in vectors[user_index]]
            events.append(encoded(te.TOPIC_MESSAGE_EMBEDDED,
                                  te.TopicMessageEmbedded(seq=seq, embedding=vector, model="m"), seq))
            user_index += 1
    owners, archives, compaction_s, archived, agent_s = {}, {}, 0.0, 0, 0.0
    pending, cache = list(events), codec.DecodedCache(capacity=16)
    while pending:
        value = pending.pop(0)
        started = time.process_time()  # CPU time: less sensitive to other load than wall time
        state, out = handle(cfg, cache.get(b"chat", raw, "chat"), decode(value), T0)
        raw = codec.dumps(state)
        cache.put(b"chat", raw, state)
        agent_s += time.process_time() - started
        for envelope in out:
            p = decode(encode(envelope)).payload
            if envelope.type == te.TOPIC_MESSAGE_ASSIGNED:
                owners.setdefault(p.topic_id, []).append(chat[p.seq][0])
            if envelope.type == te.TOPIC_COMPACTION_REQUESTED:
                started = time.process_time()
                messages = [ChatMessage(s, chat[s][1], chat[s][2]) for s in p.seqs]
                summary = await summarizer.summarize(p.title, p.previous_summary, messages, p.upto_seq)
                merged = merge_messages(archives.get(p.topic_id), [
                    {"seq": m.seq, "role": m.role, "content": m.content, "timestamp": T0} for m in messages])
                archives[p.topic_id] = compress_bytes(merged)
                compaction_s += time.process_time() - started
                archived += len(messages)
                done = te.TopicCompacted(topic_id=p.topic_id, upto_seq=p.upto_seq, archived_seqs=p.seqs,
                                         summary=summary.text, prompt_version="x-v1", model="x", generation_time_ms=0)
                pending.insert(0, encoded(te.TOPIC_COMPACTED, done, envelope.seq))
    purity = sum(Counter(o).most_common(1)[0][1] for o in owners.values()) / sum(len(o) for o in owners.values())
    print(f"| agent shell per event (decode, cached state, inbox, fold, state store), threshold {threshold} "
          f"+ {settings.topics.bonus} for the active topic "
          f"| {agent_s / len(events) * 1e6:.0f} CPU-µs ({len(events)} events, "
          f"state {len(raw) / 1000:.1f} KB at the end) |")
    if archived:
        print(f"| compaction (offline summary + gzip archive merge), threshold {threshold} + {settings.topics.bonus} "
              f"| {compaction_s / archived * 1000:.2f} CPU-ms per archived message "
              f"({archived} messages archived by the compactions of {len(archives)} topics) |")
    if compare:
        print(f"| topics found for the 6 subjects, threshold {threshold} + {settings.topics.bonus} "
              f"| {len(owners)} topics, "
              f"{purity:.0%} of messages in a topic of their majority subject |")


def compression(chat) -> None:
    """What the projector stores for each subject's archive (ideal topic assignment, seed 004's
    compaction rule: at the 13th active message all but the newest 4 are archived)."""
    print("\n| Subject | Archived messages | JSON | gzip (stored) | Size reduction gzip | + base64 (seed's form) |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for name in TOPICS:
        messages = [{"seq": s, "role": r, "content": t, "timestamp": T0 + 40 * s}
                    for s, (n, r, t) in enumerate(chat) if n == name]
        archived = messages[: len(messages) - 4] if len(messages) > 12 else []
        if not archived:
            continue
        raw, packed = to_json_bytes(archived), compress_bytes(archived)
        b64 = 4 * -(-len(packed) // 3)
        ratios.append(1 - len(packed) / len(raw))
        print(f"| {name} | {len(archived)} | {len(raw) / 1000:.1f} KB | {len(packed) / 1000:.1f} KB "
              f"| {1 - len(packed) / len(raw):.1%} | {1 - b64 / len(raw):.1%} |")
    seed = ", ".join(f"{n} messages {ratio:.1%}" for n, (_, _, ratio) in SEED.items())
    print(f"\nMean stored (gzip) size reduction {statistics.mean(ratios):.1%}; seed 004 reports {seed} (70-90%).")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux /proc), for CPU per message."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _placement_latency(client_settings, conn, chat, count: int = 20) -> list[float]:
    """Once the backlog is gone: how long one new user message takes to be placed and projected."""
    from runtime.client import MemoryClient

    users = [text for _, role, text in chat if role == "user"]
    latencies = []
    async with MemoryClient(client_settings) as client:
        for i in range(count):
            started = time.monotonic()
            await client.append_message(tenant_id="bench", conversation_id=f"latency-{i}", user_id="u", seq=0,
                                        role="user", content=users[i])
            while True:
                row = await (await conn.execute(
                    "SELECT 1 FROM topic_messages WHERE conversation_id = %s", (f"latency-{i}",))).fetchone()
                if row:
                    break
                await asyncio.sleep(0.005)
            latencies.append(time.monotonic() - started)
    return latencies


async def live(args, chat) -> None:
    """Produce a backlog of conversations, start a real worker, time how fast it places them."""
    import contextlib

    import psycopg

    from runtime.client import MemoryClient
    from core.settings import KafkaSettings, PostgresSettings
    from projections.migrate import migrate
    from runtime.kafka_topics import ensure_topics

    uid = uuid.uuid4().hex[:8]
    bootstrap = os.environ.get("MEMORY_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    dsn = os.environ.get("MEMORY_POSTGRES__DSN", "postgresql://postgres@127.0.0.1:15432/postgres")
    settings = Settings(generation=f"b{uid}", postgres=PostgresSettings(dsn=dsn), kafka=KafkaSettings(
        bootstrap_servers=bootstrap, topic_prefix=f"bench-{uid}", partitions=args.partitions))
    await asyncio.to_thread(migrate, settings)
    await ensure_topics(settings)
    env = dict(os.environ, MEMORY_GENERATION=settings.generation, MEMORY_KAFKA__BOOTSTRAP_SERVERS=bootstrap,
               MEMORY_KAFKA__TOPIC_PREFIX=settings.kafka.topic_prefix, MEMORY_KAFKA__PARTITIONS=str(args.partitions),
               MEMORY_POSTGRES__DSN=dsn, MEMORY_STATE_DIR=f"/tmp/topic-bench/{uid}", MEMORY_LOG_LEVEL="WARNING",
               MEMORY_SYSTEMS='["topics"]')
    if args.threshold is not None:
        env["MEMORY_TOPICS__SIMILARITY_THRESHOLD"] = str(args.threshold)
    log_path = Path(f"/tmp/topic-bench-{uid}.log")
    process = None
    try:
        async with MemoryClient(settings) as client:
            futures = [await client.enqueue(client.message_event(
                tenant_id="bench", conversation_id=f"chat-{c}", user_id="u", seq=seq, role=role, content=text))
                for c in range(args.conversations) for seq, (_, role, text) in enumerate(chat * args.repeat)]
            await asyncio.gather(*futures)
        total = len(futures)
        with log_path.open("wb") as log:
            started = time.monotonic()
            profile = ["-m", "cProfile", "-o", args.profile] if args.profile else []
            process = await asyncio.create_subprocess_exec(
                sys.executable, *profile, "-m", "memory_agent.cli", "worker", env=env, stdout=log,
                stderr=asyncio.subprocess.STDOUT)
        async with await psycopg.AsyncConnection.connect(
                dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True) as conn:
            first, placed = None, 0
            while placed < total:
                if process.returncode is not None:
                    raise RuntimeError(f"worker exited {process.returncode}; see {log_path}")
                if time.monotonic() - started > args.timeout:
                    raise TimeoutError(f"{placed}/{total} placed after {args.timeout}s; see {log_path}")
                row = await (await conn.execute("SELECT coalesce(sum(last_seq + 1), 0) FROM topic_conversations"))\
                    .fetchone()
                placed = int(row[0])
                if placed and first is None:
                    first = (time.monotonic(), placed, _cpu_seconds(process.pid))
                await asyncio.sleep(0.2)
            end, cpu_end = time.monotonic(), _cpu_seconds(process.pid)
            held = await (await conn.execute(
                "SELECT (SELECT count(*) FROM topic_messages), (SELECT coalesce(sum(message_count), 0)"
                " FROM topic_archives), (SELECT count(*) FROM topic_unassigned)")).fetchone()
            reasons = await (await conn.execute(
                "SELECT regexp_replace(reason, '[0-9]+', 'N', 'g') r, count(*) FROM topic_unassigned"
                " GROUP BY r ORDER BY 2 DESC LIMIT 3")).fetchall()
            # (counted before the latency probes below add their own messages)
            latencies = await _placement_latency(client_settings=settings, conn=conn, chat=chat)
            row = await (await conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE evicted_at IS NOT NULL), coalesce(sum(compactions), 0),"
                " (SELECT coalesce(1 - sum(gzip_bytes)::float8 / nullif(sum(json_bytes), 0), 0) FROM topic_archives)"
                " FROM topics")).fetchone()
        rate = (total - first[1]) / (end - first[0])
        systems = getattr(Settings(**{}), "systems", None) and os.environ.get("MEMORY_SYSTEMS", '["topics"]')
        print(f"\nLive: {args.conversations} conversations x {len(chat) * args.repeat} messages = {total} messages "
              f"backlogged on "
              f"{args.partitions} partitions, threshold {args.threshold or 'default'}, "
              f"worker systems {systems or 'all'}:")
        print(f"- worker start to first placement {first[0] - started:.1f} s; then {total - first[1]} messages in "
              f"{end - first[0]:.1f} s = **{rate:.0f} messages/s** sustained "
              f"({(cpu_end - first[2]) / (total - first[1]) * 1000:.2f} worker CPU-ms per message)")
        print(f"- {row[0]} topics ({row[1]} evicted), {row[2]} compactions, archives {row[3]:.1%} smaller than JSON")
        print(f"- in a topic: {held[0] + held[1]} of {total} messages ({held[0]} active, {held[1]} archived); "
              f"**{held[2]} unassigned**" + (" (" + "; ".join(f"{n} x {r!r}" for r, n in reasons) + ")" if reasons
                                             else ""))
        print(f"- idle worker, one user message at a time: appended -> placed in a topic (projected) "
              f"p50 {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms "
              f"({len(latencies)} messages; in order, ms: {', '.join(f'{x * 1000:.0f}' for x in latencies)})")
    finally:
        if process is not None and process.returncode is None:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 30)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{settings.pg_schema}" CASCADE')
        await drop_topics(bootstrap, settings.kafka.topic_prefix)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--offline-only", action="store_true")
    parser.add_argument("--live-only", action="store_true")
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1,
                        help="each conversation is the chat this many times over (long conversations, issue 16)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="topic similarity threshold (live run; default: the embedding model's)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--profile", help="write a cProfile of the worker (main thread) to this file")
    args = parser.parse_args()
    chat = conversation()
    print(f"{machine()}\nRealistic chat: {len(chat)} messages ({sum(r == 'user' for _, r, _ in chat)} from the user) "
          f"in {len(TOPICS)} interleaved subjects (bench/topic_compression.py).\n")
    print("| Per message | Cost |\n|---|---|")
    if not args.live_only:
        vectors = await embedding_costs(chat)
        for threshold in (0.7, 0.5, 0.3):
            await agent_costs(chat, vectors, threshold, compare=True)
        compression(chat)
    if not args.offline_only:
        await live(args, chat)


if __name__ == "__main__":
    asyncio.run(main())

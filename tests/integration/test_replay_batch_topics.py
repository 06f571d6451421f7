"""Batch replay of the topic system equals the stream replay, and the live topic fold takes over
from the batch's states (memory_agent/batch_replay/topics.py; docs/replay.md)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from memory_agent import replay as replays
from memory_agent.client import MemoryClient
from tests.integration.conftest import settings_env, wait_until, worker_process
from tests.integration.test_replay import _state_dir, named
from tests.integration.test_replay_batch_facts import _rows, caught_up
from tests.support.fake_openai import FakeOpenAI

TOPICS = {
    "MEMORY_SYSTEMS": '["topics"]',
    # Two compactions per topic of 16 messages: the 7th message asks for one (5 archived, 2 kept).
    "MEMORY_TOPICS__MAX_MESSAGES_PER_TOPIC": "6",
    "MEMORY_TOPICS__RECENT_MESSAGE_KEEP": "2",
    "MEMORY_TOPICS__SIMILARITY_THRESHOLD": "0.5",  # the fake's bag-of-words vectors
    "MEMORY_TOPICS__ACTIVE_TOPIC_BONUS": "0",
    "MEMORY_POSTGRES__POOL_MAX_SIZE": "3",  # the database is shared by every test run on this machine
}
CONVERSATIONS, SUBJECTS, TURNS = 3, ("orchid", "glacier", "saxophone"), 8  # 3 topics x 16 messages each
MESSAGES = 2 * len(SUBJECTS) * TURNS
# Columns that say when or by which event a row was written, not what it holds.
WALL_CLOCK = {"updated_at", "projected_at", "projected_pos", "event_id", "created_event_id", "generation_time_ms"}
TABLES = ("topics", "topic_messages", "topic_archives", "topic_unassigned", "topic_conversations",
          "topic_assignments", "topic_activations", "topic_compactions")


def subject_of(turn: int) -> str:
    """Two turns of each subject in turn: orchid orchid glacier glacier saxophone saxophone orchid..."""
    return SUBJECTS[(turn // 2) % len(SUBJECTS)]


async def say(settings, conversation: int, seqs) -> None:
    prefix = settings.kafka.topic_prefix  # unique per run: the embedding cache is shared by every deployment
    async with MemoryClient(settings) as client:
        for seq in seqs:
            turn, word = seq // 2, subject_of(seq // 2)
            user = seq % 2 == 0
            await client.append_message(
                tenant_id="tenant-a", conversation_id=f"conv-{conversation}", user_id=f"user-{conversation}", seq=seq,
                role="user" if user else "assistant", event_id=f"conv-{conversation}-{seq}",
                content=(f"{word} {word} {word} {word} {word} {word} question {turn} of {conversation} {prefix}"
                         if user else f"Answer {turn} about the {word} of {conversation}, {prefix}."),
            )


async def cli(settings, fake: FakeOpenAI, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", *args,
        env=settings_env(settings) | fake.env(llm=False, embeddings=True) | TOPICS,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, f"memory-agent {' '.join(args)} failed:\n{out.decode()}"
    return out.decode()


async def placed(settings, schema: str, last_seqs: dict[str, int]) -> None:
    """Every conversation's messages placed up to its last seq, no compaction in flight."""
    async def check() -> bool:
        rows = dict(await _rows(settings, f"SELECT conversation_id, last_seq FROM {schema}.topic_conversations"))
        if any(rows.get(c, -1) < seq for c, seq in last_seqs.items()):
            return False
        (pending,) = await _rows(settings, f"SELECT count(*) FROM {schema}.topics"
                                           " WHERE compaction_status = 'requested'")
        return pending[0] == 0

    await wait_until(check, 180, f"topics placed in {schema}")


async def columns(settings, schema: str, table: str, rounded: bool) -> str:
    rows = await _rows(settings, "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
                                 f" AND table_name = '{table}' ORDER BY ordinal_position".replace("%s", f"'{schema}'"))
    return ", ".join(f"round({name}::numeric, 6) AS {name}" if rounded and name == "similarity" else name
                     for (name,) in rows if name not in WALL_CLOCK)


async def differences(settings, stream: str, batch: str, *, rounded: bool = False) -> dict[str, list]:
    """Rows of each topic table in one generation and not the other (EXCEPT ALL, both ways).
    `rounded`: similarities to 6 digits (see the hand-over below)."""
    found = {}
    for table in TABLES:
        cols = await columns(settings, f"gen_{stream}", table, rounded)
        a = f"SELECT {cols} FROM gen_{stream}.{table}"
        b = f"SELECT {cols} FROM gen_{batch}.{table}"
        only = await _rows(settings, f"SELECT 'stream', * FROM ({a} EXCEPT ALL {b}) x UNION ALL"
                                     f" SELECT 'batch', * FROM ({b} EXCEPT ALL {a}) y ORDER BY 2, 3, 4, 1")
        if only:
            found[table] = [", ".join(f"{c}={v!r}" for c, v in zip(["from", *[c.rsplit(" ", 1)[-1] for c in cols.split(", ")]], row)
                                      if c not in ("archive", "title", "summary")) for row in only[:12]]
    return found


async def compactions(settings, *names: str) -> str:
    """What each generation's compactions covered (the message when they differ)."""
    found = []
    for name in names:
        rows = await _rows(settings, f"SELECT conversation_id, topic_id, upto_seq, archived_seqs"
                                     f" FROM gen_{name}.topic_compactions ORDER BY 1, 2, 3")
        found.append(f"{name}: " + "; ".join(f"{c}/{t.rsplit('-', 1)[-1]} <= {u} {a}" for c, t, u, a in rows))
    return "\n".join(found)


@pytest.mark.asyncio
async def test_batch_replay_of_topics_equals_the_stream_replay_and_hands_over(settings):
    s1, b1 = named(settings, "s1"), named(settings, "b1")
    state = settings.model_copy(update={"state_dir": _state_dir(settings)})
    last = {f"conv-{c}": MESSAGES - 1 for c in range(CONVERSATIONS)}
    with FakeOpenAI() as fake:
        env = fake.env(llm=False, embeddings=True) | TOPICS
        async with worker_process(settings, extra_env=env):
            for c in range(CONVERSATIONS):
                await say(settings, c, range(MESSAGES))
            await placed(settings, settings.pg_schema, last)
        try:
            embedded = len(fake.embedding_requests)  # the live worker filled the embedding cache
            await cli(settings, fake, "replay", "start", "--generation", s1, "--mode", "stream", "--detach")
            out = await cli(settings, fake, "replay", "start", "--generation", b1, "--detach")  # auto
            assert "batch" in out, out
            for name in (s1, b1):
                await caught_up(settings, name)
                await placed(settings, f"gen_{name}", last)
            (counts,) = await _rows(settings, f"SELECT count(*), min(compactions), sum(compactions)"
                                              f" FROM gen_{b1}.topics")
            assert counts[0] == CONVERSATIONS * len(SUBJECTS) and counts[1] >= 2, counts  # 2+ compactions each
            found = await differences(settings, s1, b1)
            assert not found, "\n".join(f"{t}: {r}" for t, rows in found.items() for r in rows) + "\n" + \
                await compactions(settings, s1, b1)
            assert await _rows(settings, f"SELECT count(*) FROM gen_{b1}.topic_unassigned") == [(0,)]
            assert len(fake.embedding_requests) == embedded  # both replays: every vector from the cache

            # Hand-over: ten more messages of conv-0 (the next five turns) are placed by the live
            # folds, the batch's from its states, and the orchid topic is compacted a third time.
            await say(settings, 0, range(MESSAGES, MESSAGES + 10))
            for name in (b1, s1):
                await placed(settings, f"gen_{name}", last | {"conv-0": MESSAGES + 9})
                assert await _rows(settings, f"SELECT compactions FROM gen_{name}.topics"
                                             " WHERE topic_id = 'conv-0:topic-1'") == [(3,)], name
            # The live fold of the batch's generation starts from the changelog, whose centroids are
            # float32 (streams/topics_memory/codec.py), while the stream's fold still holds its
            # float64 ones in memory (a restarted stream worker would differ the same way): the
            # similarities of the messages after the hand-over agree to ~1e-8, not bit for bit.
            found = await differences(settings, s1, b1, rounded=True)
            assert not found, "\n".join(f"{t}: {r}" for t, rows in found.items() for r in rows) + "\n" + \
                await compactions(settings, s1, b1)
            assert await _rows(settings, f"SELECT count(*), count(DISTINCT seq) FROM gen_{b1}.topic_assignments"
                                         " WHERE conversation_id = 'conv-0'") == [(MESSAGES + 10, MESSAGES + 10)]
        finally:
            for name in (s1, b1):
                replays.stop_worker(state, name)

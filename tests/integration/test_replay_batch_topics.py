"""Batch replay of the topic system equals the stream replay, and the live topic fold takes over
from the batch's states (memory_agent/batch_replay/topics.py; docs/replay.md)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from memory_agent import replay as replays
from runtime.client import MemoryClient
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
    """These conversations' messages placed up to their last seqs, no compaction of theirs in flight."""
    async def check() -> bool:
        rows = dict(await _rows(settings, f"SELECT conversation_id, last_seq FROM {schema}.topic_conversations"))
        if any(rows.get(c, -1) < seq for c, seq in last_seqs.items()):
            return False
        names = ", ".join(f"'{c}'" for c in last_seqs)
        (pending,) = await _rows(settings, f"SELECT count(*) FROM {schema}.topics WHERE compaction_status ="
                                           f" 'requested' AND conversation_id IN ({names})")
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
        only = await _rows(settings, f"SELECT '{stream}', * FROM ({a} EXCEPT ALL {b}) x UNION ALL"
                                     f" SELECT '{batch}', * FROM ({b} EXCEPT ALL {a}) y ORDER BY 2, 3, 4, 1")
        if only:
            names = ["from", *[c.rsplit(" ", 1)[-1] for c in cols.split(", ")]]
            found[table] = [", ".join(f"{c}={v!r}" for c, v in zip(names, row)
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
            _, out = await asyncio.gather(  # both detach: they run side by side either way
                cli(settings, fake, "replay", "start", "--generation", s1, "--mode", "stream", "--detach"),
                cli(settings, fake, "replay", "start", "--generation", b1, "--detach"))  # auto
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


MARKER = "zebulon"  # in the erased messages only


async def residue(settings, schema: str) -> dict[str, int]:
    """Rows of the topic tables holding the marker (archives gunzipped)."""
    import gzip

    found = {}
    for table in TABLES:
        if table == "topic_archives":
            rows = await _rows(settings, f"SELECT archive FROM {schema}.topic_archives")
            count = sum(MARKER in gzip.decompress(bytes(archive)).decode() for (archive,) in rows)
        else:
            ((count,),) = await _rows(settings, f"SELECT count(*) FROM {schema}.{table} t WHERE t::text LIKE"
                                                f" '%{MARKER}%'")
        if count:
            found[table] = count
    return found


async def fold_states(settings, generation: str) -> dict[bytes, bytes]:
    """The topic fold's states in the processor's changelog of a generation: key -> newest state (raw)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from runtime.kafka_topics import changelog_topic
    from streams.processor import CONVERSATION_TABLE
    from streams.slice import unpack

    topic = changelog_topic(settings.model_copy(update={"generation": generation}), CONVERSATION_TABLE)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(settings.kafka.partitions)]  # as the batch made it
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        states = {}
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                states.update((r.key, unpack(r.value)["topics"]) for r in records if "topics" in unpack(r.value))
        return states
    finally:
        await consumer.stop()


@pytest.mark.asyncio
async def test_the_batch_s_topic_fold_never_sees_what_the_log_s_erasures_cover(settings):
    """A conversation erasure and a user erasure in the log (the user's own conversation, and a
    message of theirs in another owner's): the batch applies the log's erasures before it folds the
    topics, so no erased word is in any topic table nor in the fold's states it hands over, as in
    the stream replay's tables; a message written into the erased conversation afterwards starts a
    topic of its own (before the rule, it joined the erased messages' topic and brought its title
    back). The unaffected conversation's topics are the stream replay's."""
    from schemas import erasure_events as ee
    from schemas.codec import new_event

    s1, b1 = named(settings, "s1"), named(settings, "b1")
    state = settings.model_copy(update={"state_dir": _state_dir(settings)})
    prefix = settings.kafka.topic_prefix
    with FakeOpenAI() as fake:
        async with MemoryClient(settings) as client:
            async def said(conversation: str, user: str, seq: int, word: str, marked: bool = False) -> None:
                marker = f" {MARKER}" if marked else ""
                await client.append_message(
                    tenant_id="tenant-a", conversation_id=conversation, user_id=user, seq=seq,
                    role="user" if seq % 2 == 0 else "assistant", event_id=f"{conversation}-{seq}",
                    content=(f"{word} {word} {word} {word} {word} {word} question {seq}{marker} {prefix}"
                             if seq % 2 == 0 else f"Answer {seq} about the {word}{marker}, {prefix}."))

            for seq in range(16):
                await said("conv-0", "alice", seq, subject_of(seq // 2))  # kept
                await said("conv-1", "carol", seq, "orchid", marked=True)  # erased whole
                await said("conv-2", "bob", seq, "glacier", marked=True)  # bob's own: his erasure takes it whole
                # dave's, where bob wrote seq 4: mixed (bob's message goes, the topics are derived again)
                if seq == 4:
                    await client.append_message(tenant_id="tenant-a", conversation_id="conv-3", user_id="bob", seq=4,
                                                role="user", event_id="conv-3-4",
                                                content=f"saxophone saxophone saxophone {MARKER} {prefix}")
                else:
                    await said("conv-3", "dave", seq, "saxophone")
            erased = ee.ConversationErased(erased_conversation_id="conv-1")
            await client.append(new_event(ee.CONVERSATION_ERASED, erased, tenant_id="tenant-a",
                                          conversation_id="conv-1", user_id="carol"))
            await client.append(new_event(ee.USER_ERASED, ee.UserErased(erased_user_id="bob"), tenant_id="tenant-a",
                                          conversation_id=ee.erasure_stream("bob"), user_id="admin:ops"))
        try:
            await asyncio.gather(  # both detach: they run side by side either way
                cli(settings, fake, "replay", "start", "--generation", s1, "--mode", "stream", "--detach"),
                cli(settings, fake, "replay", "start", "--generation", b1, "--mode", "batch", "--detach"))
            for name in (s1, b1):
                await caught_up(settings, name)
            await placed(settings, f"gen_{b1}", {"conv-0": 15, "conv-3": 15})
            await placed(settings, f"gen_{s1}", {"conv-0": 15, "conv-3": 15})
            # Every conversation: the stream replay's topics are the batch's (the stream's topic fold
            # sees no message a later erasure of the log covers either: streams/topics_memory/erased.py).
            found = await differences(settings, s1, b1)
            assert not any(found.values()), found
            assert await residue(settings, f"gen_{s1}") == {}
            assert await residue(settings, f"gen_{b1}") == {}
            assert await _rows(settings, f"SELECT DISTINCT conversation_id FROM gen_{b1}.topic_assignments"
                                         " ORDER BY 1") == [("conv-0",), ("conv-3",)]
            assert await _rows(settings, f"SELECT seq FROM gen_{b1}.topic_assignments WHERE conversation_id"
                                         " = 'conv-3' ORDER BY 1") == [(s,) for s in range(16) if s != 4]
            states = await fold_states(settings, b1)
            assert states and not [key for key, raw in states.items() if MARKER.encode() in raw], list(states)

            async def rederive_sent() -> bool:
                return await _rows(settings, f"SELECT count(*) FROM gen_{b1}.erasure_rederive"
                                             " WHERE conversation_id = 'conv-3' AND sent_at IS NOT NULL") == [(1,)]

            await wait_until(rederive_sent, 60, "the re-derivation of conv-3 sent")
            # carol writes into her erased conversation again: the batch's fold has nothing of hers,
            # so the message starts a topic of its own (no erased title comes back).
            async with MemoryClient(settings) as client:
                await client.append_message(tenant_id="tenant-a", conversation_id="conv-1", user_id="carol", seq=16,
                                            role="user", event_id="conv-1-16",
                                            content=f"orchid orchid orchid orchid orchid orchid again {prefix}")
            await placed(settings, f"gen_{b1}", {"conv-1": 16})
            assert await residue(settings, f"gen_{b1}") == {}
            assert await _rows(settings, f"SELECT seq FROM gen_{b1}.topic_messages WHERE conversation_id = 'conv-1'") \
                == [(16,)]
            # The re-derivation asked for after the hand-over found conv-3 derived already (its
            # messages stay in the batch's topic; derived again they would go to a new one).
            async with MemoryClient(settings) as client:
                await client.append_message(tenant_id="tenant-a", conversation_id="conv-3", user_id="dave", seq=16,
                                            role="user", event_id="conv-3-16",
                                            content=f"saxophone saxophone saxophone saxophone again {prefix}")
            await placed(settings, f"gen_{b1}", {"conv-1": 16, "conv-3": 16})
            assert await _rows(settings, f"SELECT DISTINCT topic_id FROM gen_{b1}.topic_assignments"
                                         " WHERE conversation_id = 'conv-3'") == [("conv-3:topic-1",)]
            assert await residue(settings, f"gen_{b1}") == {}
        finally:
            for name in (s1, b1):
                replays.stop_worker(state, name)


@pytest.mark.asyncio
async def test_a_topic_batch_killed_midway_resumes_and_equals_an_uninterrupted_one(settings):
    """SIGKILL the batch once the first topic rows are projected; `replay resume` redoes the
    partitions not handed over (their topic events are written and projected again) and ends with
    the rows of an uninterrupted batch replay, nothing counted twice."""
    import os
    import signal

    k1, b1 = named(settings, "k1"), named(settings, "b1")
    state = settings.model_copy(update={"state_dir": _state_dir(settings)})
    conversations = 6
    last = {f"conv-{c}": MESSAGES - 1 for c in range(conversations)}
    with FakeOpenAI(latency_s=1.0) as fake:  # an embedding call per partition of 1 s: time to catch it midway
        for c in range(conversations):
            await say(settings, c, range(MESSAGES))
        try:
            await cli(settings, fake, "replay", "start", "--generation", k1, "--mode", "batch", "--detach")

            async def folding() -> bool:
                try:
                    return (await _rows(settings, f"SELECT count(*) FROM gen_{k1}.topic_assignments"))[0][0] > 0
                except Exception:  # noqa: BLE001 - the schema is being made
                    return False

            await wait_until(folding, 120, "the first topic rows")
            os.killpg(int(replays.pid_file(state, k1).read_text()), signal.SIGKILL)
            assert not (await replays.progress(settings, k1)).caught_up

            out, _ = await asyncio.gather(  # the uninterrupted one is built beside the resumed one
                cli(settings, fake, "replay", "resume", k1),
                cli(settings, fake, "replay", "start", "--generation", b1, "--mode", "batch", "--detach"))
            assert "batch replay" in out
            for name in (k1, b1):
                await caught_up(settings, name)
                await placed(settings, f"gen_{name}", last)
            found = await differences(settings, k1, b1)
            assert not found, "\n".join(f"{t}: {r}" for t, rows in found.items() for r in rows)
            for name in (k1, b1):
                assert await _rows(settings, f"SELECT count(*), count(DISTINCT (conversation_id, seq)) FROM"
                                             f" gen_{name}.topic_assignments") == [(conversations * MESSAGES,) * 2]
                (row,) = await _rows(settings, f"SELECT min(compactions), max(compactions) FROM gen_{name}.topics")
                assert row == (2, 2), (name, row)  # each compaction applied once
        finally:
            for name in (k1, b1):
                replays.stop_worker(state, name)

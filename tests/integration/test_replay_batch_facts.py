"""Batch replay of the window + chunks/facts systems equals the stream replay, and the live
agents take over from it with nothing lost or repeated (the diff test of test_replay.py,
extended to chunks and facts)."""

from __future__ import annotations

import asyncio
import json
import re
import sys

import pytest

from memory_agent import replay as replays
from runtime.client import MemoryClient
from tests.integration.conftest import settings_env, wait_until, worker_process
from tests.integration.test_replay import _rows as _connect_and_fetch
from tests.integration.test_replay import _state_dir, named
from tests.support.fake_openai import FakeOpenAI

WINDOW_FACTS = {
    "MEMORY_SYSTEMS": '["window", "facts"]',
    "MEMORY_FACTS__SUMMARIZATION_THRESHOLD": "6",  # a chunk of 4 once more than 6 are unsummarized
    "MEMORY_FACTS__BATCH_SIZE": "4",
    "MEMORY_POSTGRES__POOL_MAX_SIZE": "3",  # the database is shared by every test run on this machine
}
CONVERSATIONS, ROUNDS = 3, 8  # 16 messages each: chunks [0,4) [4,8) [8,12), three waves
LINE = re.compile(r"^\[(\d+)\] [^:]*: (.*)$", re.MULTILINE)


def extractor(record) -> dict:
    """A model following the extraction prompt: a summary and one fact per first-person line."""
    lines = LINE.findall(record.user_content)
    facts = [{"category": "hobby", "content": f"The user said: {text}", "importance": 3}
             for _, text in lines if text.startswith("I ")]
    return {"summary": "; ".join(text for _, text in lines)[:300] or "nothing", "facts": facts}


async def cli(settings, fake: FakeOpenAI, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", *args,
        env=settings_env(settings) | fake.env(llm=True, embeddings=True) | WINDOW_FACTS,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, f"memory-agent {' '.join(args)} failed:\n{out.decode()}"
    return out.decode()


async def say(settings, conversation: int, seqs) -> None:
    async with MemoryClient(settings) as client:
        for seq in seqs:
            user = seq % 2 == 0
            await client.append_message(
                # One owner per conversation: the facts projector merges an owner's similar facts in
                # the order it sees them, which across conversations is timing in a stream replay.
                tenant_id="tenant-a", conversation_id=f"conv-{conversation}", user_id=f"user-{conversation}", seq=seq,
                role="user" if user else "assistant", event_id=f"conv-{conversation}-{seq}",
                # Unique per test: the LLM and embedding caches are shared by every deployment.
                # The last conversation says "We": its chunks carry no facts (the batch bulk-loads those).
                content=(f"{'We' if conversation == CONVERSATIONS - 1 else 'I'}"
                         f" {['play', 'cook', 'paint', 'climb'][seq % 4]} on day {seq} of conversation"
                         f" {conversation} ({settings.kafka.topic_prefix})." if user
                         else f"Noted, point {seq} of {settings.kafka.topic_prefix}."),
            )


async def _rows(settings, sql: str) -> list[tuple]:
    """The database is shared by every test run on this machine: a moment without a free
    connection is waited out, not a failure."""
    import psycopg

    for _ in range(60):
        try:
            return await _connect_and_fetch(settings, sql)
        except psycopg.OperationalError as exc:
            if "too many clients" not in str(exc):
                raise
            await asyncio.sleep(1)
    return await _connect_and_fetch(settings, sql)


async def chunks_settled(settings, schema: str, expected: int) -> None:
    async def check() -> bool:
        return (await _rows(settings, f"SELECT count(*) FROM {schema}.conversation_chunks"))[0][0] >= expected

    await wait_until(check, 120, f"{expected} chunks in {schema}")


async def caught_up(settings, name: str) -> None:
    async def check() -> bool:
        import psycopg

        try:
            p = await replays.progress(settings, name)
        except psycopg.OperationalError:  # no free connection this moment (shared database)
            return False
        return p.caught_up and p.total > 0

    await wait_until(check, 120, f"generation {name} to catch up")


async def summaries_settled(settings, name: str) -> None:
    """Every requested summary of the generation is completed (none processing or failed)."""
    async def check() -> bool:
        (row,) = await _rows(settings, f"SELECT count(*) FILTER (WHERE status <> 'completed'), count(*)"
                                       f" FROM gen_{name}.memory")
        return row[0] == 0 and row[1] > 0

    await wait_until(check, 90, f"summaries of {name}")


TABLES = (
    ("messages", "tenant_id, conversation_id, seq, event_id, role, content"),
    ("conversations", "tenant_id, conversation_id, last_seq, message_count"),
    ("memory", "conversation_id, memory_id, start_sequence, end_sequence, base_memory_id, status, memory_text"),
    ("conversation_chunks", "conversation_id, message_range_start, message_range_end, chunk_id, user_id, content,"
                            " embedding::text, model, prompt_version, source_event_ids"),
    ("facts", "fact_id, source_chunk_id, content, category, importance, owner_user_id, embedding::text,"
              " valid_to IS NULL, deleted_at IS NULL, source_event_ids"),
)


@pytest.mark.asyncio
async def test_batch_replay_of_chunks_and_facts_equals_the_stream_replay_and_hands_over(settings):
    s1, b1 = named(settings, "s1"), named(settings, "b1")
    state = settings.model_copy(update={"state_dir": _state_dir(settings)})
    with FakeOpenAI(latency_s=0.02, json_responder=extractor) as fake:
        env = fake.env(llm=True, embeddings=True) | WINDOW_FACTS
        async with worker_process(settings, extra_env=env):
            for c in range(CONVERSATIONS):
                await say(settings, c, range(2 * ROUNDS))
            await chunks_settled(settings, settings.pg_schema, 3 * CONVERSATIONS)
        try:
            _, out = await asyncio.gather(  # both detach: they run side by side either way
                cli(settings, fake, "replay", "start", "--generation", s1, "--mode", "stream", "--detach"),
                cli(settings, fake, "replay", "start", "--generation", b1, "--detach"))  # auto
            assert "batch" in out, out
            for name in (s1, b1):
                await caught_up(settings, name)
                await summaries_settled(settings, name)
                await chunks_settled(settings, f"gen_{name}", 3 * CONVERSATIONS)
            diff = json.loads(await cli(settings, fake, "generations", "diff", s1, b1, "--json"))
            assert diff["empty"] is True, json.dumps(diff)[:3000]
            for table, columns in TABLES:
                stream_rows = await _rows(settings, f"SELECT {columns} FROM gen_{s1}.{table} ORDER BY 1, 2, 3")
                batch_rows = await _rows(settings, f"SELECT {columns} FROM gen_{b1}.{table} ORDER BY 1, 2, 3")
                assert batch_rows, table
                assert stream_rows == batch_rows, table
            assert await _rows(settings, f"SELECT count(*) FROM gen_{b1}.facts WHERE source_conversation_id ="
                                         f" 'conv-{CONVERSATIONS - 1}'") == [(0,)]  # fact-less chunks only

            # Hand-over: four more messages of conv-0 make the range [12,16) due. The live chunk
            # fold goes on from the batch's state (a fold starting from nothing would ask for
            # [0,4) again and never get to [12,16)); nothing is lost or counted twice.
            await say(settings, 0, range(2 * ROUNDS, 2 * ROUNDS + 4))

            async def continued() -> bool:
                found = [await _rows(settings, f"SELECT message_range_start, message_range_end FROM"
                                               f" gen_{name}.conversation_chunks WHERE conversation_id = 'conv-0'"
                                               " ORDER BY 1") for name in (s1, b1)]
                return all(f == [(0, 4), (4, 8), (8, 12), (12, 16)] for f in found)

            await wait_until(continued, 120, "the next chunk of conv-0 in both generations")
            for name in (s1, b1):
                await summaries_settled(settings, name)
            for table, columns in TABLES:
                stream_rows = await _rows(settings, f"SELECT {columns} FROM gen_{s1}.{table} ORDER BY 1, 2, 3")
                batch_rows = await _rows(settings, f"SELECT {columns} FROM gen_{b1}.{table} ORDER BY 1, 2, 3")
                assert stream_rows == batch_rows, table
            assert (await _rows(settings, f"SELECT count(*), count(DISTINCT seq) FROM gen_{b1}.messages"
                                          " WHERE conversation_id = 'conv-0'")) == [(20, 20)]
            assert await _rows(settings, f"SELECT kind FROM gen_{b1}.projection_anomalies") == []
            diff = json.loads(await cli(settings, fake, "generations", "diff", s1, b1, "--json"))
            assert diff["empty"] is True, json.dumps(diff)[:3000]
        finally:
            for name in (s1, b1):
                replays.stop_worker(state, name)

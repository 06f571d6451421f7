"""Replay into a new generation beside the live one: prompt change, switch, rollback, cache, diff."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys

import httpx
import pytest

from memory_agent import replay as replays
from runtime.client import MemoryClient
from schemas.envelope import conversation_key
from tests.integration.conftest import running_api, settings_env, wait_until, worker_process
from tests.support.fake_openai import FakeOpenAI

WINDOW_ONLY = {"MEMORY_SYSTEMS": '["window"]'}


async def cli(settings, fake: FakeOpenAI, *args: str) -> str:
    """Run `memory-agent ...` as a user would, against this test's deployment."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", *args,
        env=settings_env(settings) | fake.env() | WINDOW_ONLY,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, f"memory-agent {' '.join(args)} failed:\n{out.decode()}"
    return out.decode()


async def talk(settings, conversations: int, rounds: int) -> None:
    async with MemoryClient(settings) as client:
        for c in range(conversations):
            for seq in range(2 * rounds):
                await client.append_message(
                    tenant_id="tenant-a", conversation_id=f"conv-{c}", user_id="alice", seq=seq,
                    role="user" if seq % 2 == 0 else "assistant",
                    # Unique per test: the LLM cache is shared by every deployment on this database.
                    content=f"Conversation {c} of {settings.kafka.topic_prefix}, message {seq}: we settle point {seq}.",
                    event_id=f"conv-{c}-{seq}",
                )


async def caught_up(settings, name: str) -> None:
    async def check() -> bool:
        p = await replays.progress(settings, name)
        return p.caught_up and p.total > 0

    await wait_until(check, 120, f"generation {name} to catch up")


async def summary_of(http: httpx.AsyncClient, conversation: str) -> dict | None:
    response = await http.get(f"/v1/conversations/{conversation}/context")
    assert response.status_code == 200, response.text
    return response.json()["summary"]


async def serving(http: httpx.AsyncClient, name: str) -> None:
    """Polls until the API reads from generation `name` (it re-reads the active one every second;
    /readyz and the reads share that lookup, so a read after this one comes from `name`)."""
    async def switched() -> bool:
        return (await http.get("/readyz")).json()["generation"] == name

    await wait_until(switched, 30, f"the API to read generation {name}")


def named(settings, suffix: str) -> str:
    """Generation names are schema names, shared by every deployment on the database."""
    return f"{settings.generation}_{suffix}"


@contextlib.asynccontextmanager
async def live_deployment(settings, fake: FakeOpenAI):
    async with worker_process(settings, extra_env=fake.env() | WINDOW_ONLY) as live, running_api(settings) as base:
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": "key-a"}, timeout=10) as http:
            try:
                yield live, http
            finally:
                for suffix in ("v2", "r1", "r2", "s1", "b1"):
                    replays.stop_worker(settings.model_copy(update={"state_dir": _state_dir(settings)}),
                                        named(settings, suffix))


def _state_dir(settings):
    from pathlib import Path

    return Path(settings_env(settings)["MEMORY_STATE_DIR"])


async def live_summaries_done(settings, http, conversations: int) -> None:
    async def check() -> bool:
        for c in range(conversations):
            response = await http.get(f"/v1/conversations/conv-{c}/context")
            if response.status_code != 200 or response.json()["mode"] != "caught_up":
                return False
        return True

    await wait_until(check, 90, "live summaries")


@pytest.mark.asyncio
async def test_prompt_change_replay_switch_and_rollback(settings):
    v2 = named(settings, "v2")
    with FakeOpenAI(latency_s=0.05) as fake:
        async with live_deployment(settings, fake) as (_, http):
            await talk(settings, conversations=2, rounds=6)
            await live_summaries_done(settings, http, 2)
            live = await summary_of(http, "conv-0")
            assert live["prompt_version"] == "summary-v1"

            await cli(settings, fake, "replay", "start", "--generation", v2,
                      "--set", "llm.summary_prompt_version=summary-v2", "--detach")
            await caught_up(settings, v2)
            await _summaries_settled(settings, v2)
            # The live generation keeps serving reads until the switch.
            assert (await summary_of(http, "conv-0"))["prompt_version"] == "summary-v1"
            assert any("Open questions" in r.system_content for r in fake.chat_requests), [r.system_content[-200:] for r in fake.chat_requests][-3:]

            out = await cli(settings, fake, "generations", "activate", v2)
            assert "rollback" in out
            await serving(http, v2)
            switched = await summary_of(http, "conv-0")
            assert switched["prompt_version"] == "summary-v2"
            assert (await http.get("/readyz")).json()["generation"] == v2

            await cli(settings, fake, "generations", "activate", settings.generation)
            await serving(http, settings.generation)
            assert (await summary_of(http, "conv-0"))["prompt_version"] == "summary-v1"

            # Read-only commands, side by side (each is a process start, mostly imports).
            status, diff = await asyncio.gather(
                cli(settings, fake, "replay", "status", v2, "--json"),
                cli(settings, fake, "generations", "diff", settings.generation, v2, "--json"))
            status, diff = json.loads(status), json.loads(diff)
            assert status[v2]["caught_up"] is True and status[v2]["behind"] == {}
            assert status[v2]["llm_cache"]["summary"]["calls"] > 0
            assert diff["summaries"]  # new prompt, new summaries


@pytest.mark.asyncio
async def test_replaying_twice_without_changes_costs_no_llm_calls_and_diffs_empty(settings):
    r1, r2 = named(settings, "r1"), named(settings, "r2")
    with FakeOpenAI(latency_s=0.05) as fake:
        async with live_deployment(settings, fake) as (_, http):
            await talk(settings, conversations=3, rounds=8)
            await live_summaries_done(settings, http, 3)

            await cli(settings, fake, "replay", "start", "--generation", r1, "--detach")
            await caught_up(settings, r1)
            await _summaries_settled(settings, r1)
            calls_after_first = len(fake.chat_requests)

            await cli(settings, fake, "replay", "start", "--generation", r2, "--detach")
            await caught_up(settings, r2)
            await _summaries_settled(settings, r2)

            assert len(fake.chat_requests) == calls_after_first, "the second replay called the LLM"
            status, diff, text = await asyncio.gather(  # read-only commands, side by side
                cli(settings, fake, "replay", "status", r2, "--json"),
                cli(settings, fake, "generations", "diff", r1, r2, "--json"),
                cli(settings, fake, "generations", "diff", r1, r2))
            status, diff = json.loads(status), json.loads(diff)
            assert status[r2]["llm_cache"]["summary"] == {"hits": status[r2]["llm_cache"]["summary"]["hits"],
                                                            "calls": 0}
            assert status[r2]["llm_cache"]["summary"]["hits"] >= 3 * 3
            assert diff["empty"] is True, diff
            assert "no differences" in text

            await cli(settings, fake, "replay", "cancel", r2)
            await cli(settings, fake, "generations", "drop", r2)
            listed = await cli(settings, fake, "generations", "list")
            assert r2 not in listed and r1 in listed


@pytest.mark.asyncio
async def test_batch_and_stream_replays_build_the_same_memory_and_the_agents_take_over(settings):
    """`--mode batch` folds the history in bulk and hands over to the stream agents; it must
    leave what `--mode stream` leaves, and the agents must go on from its states."""
    s1, b1 = named(settings, "s1"), named(settings, "b1")
    with FakeOpenAI(latency_s=0.02) as fake:
        async with live_deployment(settings, fake) as (_, http):
            await talk(settings, conversations=3, rounds=8)
            async with MemoryClient(settings) as client:
                await client.send_raw(b"not an event", key=conversation_key("tenant-a", "conv-1"))
            await live_summaries_done(settings, http, 3)

            _, out = await asyncio.gather(  # both detach: they run side by side either way
                cli(settings, fake, "replay", "start", "--generation", s1, "--mode", "stream", "--detach"),
                cli(settings, fake, "replay", "start", "--generation", b1, "--mode", "batch", "--detach"))
            assert "batch" in out
            for name in (s1, b1):
                await caught_up(settings, name)
                await _summaries_settled(settings, name)
            diff = json.loads(await cli(settings, fake, "generations", "diff", s1, b1, "--json"))
            assert diff["empty"] is True, diff
            for table, columns in (("messages", "tenant_id, conversation_id, seq, event_id, role, content"),
                                   ("conversations", "tenant_id, conversation_id, last_seq, message_count"),
                                   ("projection_anomalies", "kind, source_partition, source_offset"),
                                   ("memory", "conversation_id, memory_id, start_sequence, end_sequence,"
                                              " base_memory_id, status, memory_text, prompt_version")):
                stream_rows = await _rows(settings, f"SELECT {columns} FROM gen_{s1}.{table} ORDER BY 1, 2, 3")
                batch_rows = await _rows(settings, f"SELECT {columns} FROM gen_{b1}.{table} ORDER BY 1, 2, 3")
                assert stream_rows == batch_rows, table
                assert batch_rows, table
            assert await _rows(settings, f"SELECT kind FROM gen_{b1}.projection_anomalies") == [("invalid",)]
            # The batch indexed the log too (its own positions, not the stream's), and built the
            # vector index it deferred exactly as the migration defines it.
            index = "SELECT tenant_id, conversation_id, seq, embedding::text FROM gen_{}.message_embeddings ORDER BY 1, 2, 3"
            indexed = [await _rows(settings, index.format(name)) for name in (s1, b1)]
            assert indexed[0] == indexed[1] and len(indexed[1]) == 3 * 16, len(indexed[1])
            definition = ("SELECT replace(indexdef, schemaname, 'g') FROM pg_indexes WHERE schemaname = %s"
                          " AND indexname = 'memory_items_embedding'")
            definitions = [await _rows(settings, definition, (f"gen_{name}",)) for name in (s1, b1)]
            assert definitions[0] == definitions[1] and len(definitions[1]) == 1, definitions
            # memory_items' index was built after the load (deferred): the rows it holds are the
            # stream replay's, and the per-table vector index is gone in both (migration 0055).
            items = ("SELECT item_id, content, embedding::text FROM gen_{}.memory_items WHERE kind = 'message'"
                     " ORDER BY 1")
            searched = [await _rows(settings, items.format(name)) for name in (s1, b1)]
            assert searched[0] == searched[1] and len(searched[1]) == 3 * 16, len(searched[1])
            legacy = ("SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname IN"
                      " ('message_embeddings_embedding', 'facts_embedding', 'conversation_chunks_embedding')")
            assert [await _rows(settings, legacy, (f"gen_{name}",)) for name in (s1, b1)] == [[], []]

            # After the history the stream agents go on from the batch's states: the next
            # round's summary continues the chain (memory 4 on memory 3), as in the stream replay.
            async with MemoryClient(settings) as client:
                for seq in (16, 17):
                    await client.append_message(
                        tenant_id="tenant-a", conversation_id="conv-0", user_id="alice", seq=seq,
                        role="user" if seq % 2 == 0 else "assistant", content=f"live {seq} {settings.generation}")

            async def continued() -> bool:
                rows = [await _rows(settings, f"SELECT memory_id, base_memory_id, status FROM gen_{name}.memory"
                                              " WHERE conversation_id = 'conv-0' AND end_sequence = 17")
                        for name in (s1, b1)]
                return all(r == [(4, 3, "completed")] for r in rows)

            await wait_until(continued, 90, "the next summary in both generations")
            diff = json.loads(await cli(settings, fake, "generations", "diff", s1, b1, "--json"))
            assert diff["empty"] is True, diff


@pytest.mark.asyncio
async def test_a_batch_replay_killed_midway_resumes_and_loses_nothing(settings):
    """SIGKILL the batch after some partitions were handed over; `replay resume` redoes the
    rest and the result equals an uninterrupted batch replay of the same log."""
    import os
    import signal

    k1, b1 = named(settings, "k1"), named(settings, "b1")
    state = settings.model_copy(update={"state_dir": _state_dir(settings)})
    with FakeOpenAI(latency_s=1.0) as fake:  # 3 waves of 1 s per partition: time to catch it midway
        await talk(settings, conversations=8, rounds=8)
        async with MemoryClient(settings) as client:
            await client.send_raw(b"not an event", key=conversation_key("tenant-a", "conv-3"))
        try:
            await cli(settings, fake, "replay", "start", "--generation", k1, "--mode", "batch", "--detach")

            async def partly_handed_over() -> bool:
                p = await replays.progress(settings, k1)
                return 0 < p.folded < p.total

            await wait_until(partly_handed_over, 60, "some partitions handed over")
            os.killpg(int(replays.pid_file(state, k1).read_text()), signal.SIGKILL)
            assert not (await replays.progress(settings, k1)).caught_up

            # The uninterrupted batch replay of the same log is built beside the resumed one.
            out, _ = await asyncio.gather(
                cli(settings, fake, "replay", "resume", k1),
                cli(settings, fake, "replay", "start", "--generation", b1, "--mode", "batch", "--detach"))
            assert "batch replay" in out
            await caught_up(settings, k1)
            await _summaries_settled(settings, k1)
            await caught_up(settings, b1)
            await _summaries_settled(settings, b1)
            diff = json.loads(await cli(settings, fake, "generations", "diff", k1, b1, "--json"))
            assert diff["empty"] is True, diff
            for table in ("messages", "memory", "conversations", "projection_anomalies"):
                counts = [await _rows(settings, f"SELECT count(*) FROM gen_{name}.{table}") for name in (k1, b1)]
                assert counts[0] == counts[1] and counts[0][0][0] > 0, table
            # Redone partitions did not count their own messages again as duplicates.
            assert await _rows(settings, f"SELECT kind FROM gen_{k1}.projection_anomalies") == [("invalid",)]
            assert (await _rows(settings, f"SELECT count(*) FROM gen_{k1}.memory"))[0][0] == 8 * 3
        finally:
            for name in (k1, b1):
                replays.stop_worker(state, name)


@pytest.mark.asyncio
async def test_a_batch_replay_leaves_out_what_erasures_in_the_log_cover_as_the_stream_replay_does(settings):
    """The batch indexes the history itself; the erasures in the log apply once every partition
    is rebuilt (a user's erasure sits on another partition than the user's conversations): an
    erased conversation and an erased user's conversations are gone from the batch generation,
    their messages and embeddings, exactly as from a stream replay."""
    from schemas import erasure_events as ee
    from schemas.codec import new_event

    s1, b1 = named(settings, "s1"), named(settings, "b1")
    state = settings.model_copy(update={"state_dir": _state_dir(settings)})
    with FakeOpenAI(latency_s=0.0) as fake:
        await talk(settings, conversations=4, rounds=4)
        async with MemoryClient(settings) as client:
            for conversation in ("conv-b1", "conv-b2", "conv-b3"):
                for seq in range(4):
                    await client.append_message(tenant_id="tenant-a", conversation_id=conversation, user_id="bob",
                                                seq=seq, role="user", content=f"bob {seq} {settings.generation}")
            await client.append(new_event(ee.CONVERSATION_ERASED, ee.ConversationErased(erased_conversation_id="conv-1"),
                                          tenant_id="tenant-a", conversation_id="conv-1", user_id="alice"))
            await client.append(new_event(ee.USER_ERASED, ee.UserErased(erased_user_id="bob"), tenant_id="tenant-a",
                                          conversation_id=ee.erasure_stream("bob"), user_id="admin:ops"))
            # (No message of an erased conversation after its erasure: the batch applies the
            # erasures after every message, so it would delete those too; docs/replay.md.)
            await client.append_message(tenant_id="tenant-a", conversation_id="conv-0", user_id="alice",
                                        seq=8, role="user", content=f"late {settings.generation}")
        try:
            await asyncio.gather(  # both detach: they run side by side either way
                cli(settings, fake, "replay", "start", "--generation", s1, "--mode", "stream", "--detach"),
                cli(settings, fake, "replay", "start", "--generation", b1, "--mode", "batch", "--detach"))
            for name in (s1, b1):
                await caught_up(settings, name)
            for table in ("messages", "message_embeddings", "conversations"):
                found = [await _rows(settings, f"SELECT conversation_id, count(*) FROM gen_{name}.{table}"
                                               " GROUP BY 1 ORDER BY 1") for name in (s1, b1)]
                assert found[0] == found[1], (table, found)
                assert [c for c, _ in found[1]] == ["conv-0", "conv-2", "conv-3"], (table, found[1])
            erasures = [await _rows(settings, f"SELECT event_id FROM gen_{name}.erasures ORDER BY 1")
                        for name in (s1, b1)]
            assert erasures[0] == erasures[1] and len(erasures[1]) == 2
        finally:
            for name in (s1, b1):
                replays.stop_worker(state, name)


async def _rows(settings, sql: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn) as conn:
        return await (await conn.execute(sql, params or None)).fetchall()


async def _summaries_settled(settings, name: str) -> None:
    """Every requested summary of the generation is completed (none processing or failed)."""
    import psycopg

    async def check() -> bool:
        async with await psycopg.AsyncConnection.connect(settings.postgres.dsn) as conn:
            row = await (await conn.execute(
                f"SELECT count(*) FILTER (WHERE status <> 'completed'), count(*) FROM gen_{name}.memory"
            )).fetchone()
        return row[0] == 0 and row[1] > 0

    await wait_until(check, 90, f"summaries of {name}")


FACTS_ONLY = {
    "MEMORY_SYSTEMS": '["facts"]',
    "MEMORY_FACTS__SUMMARIZATION_THRESHOLD": "6",
    "MEMORY_FACTS__BATCH_SIZE": "4",
}
SESSION = [
    "I live in Lisbon with my family.", "Lisbon is lovely; how long have you lived there?",
    "My daughter is called Ana and she is seven.", "Ana is a lovely name.",
    "I work as a carpenter in a small workshop.", "Carpentry takes real skill.",
    "I prefer tea to coffee in the morning.", "Noted: tea in the morning.",
]


async def facts_of(http: httpx.AsyncClient) -> dict[str, str]:
    response = await http.get("/v1/facts", params={"subject_id": "grandpa"}, headers={"X-User-Id": "alice"})
    assert response.status_code == 200, response.text
    return {f["content"]: f["fact_id"] for f in response.json()["facts"]}


@pytest.mark.asyncio
async def test_a_fact_deleted_before_the_replay_stays_deleted_after_it(settings):
    """Offline extractor and embedder (no LLM): the owner's deletion is in the log, so it
    applies to the fact the replay extracts again."""
    f2 = named(settings, "f2")
    async with worker_process(settings, extra_env=FACTS_ONLY) as live, running_api(settings) as base:
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": "key-a"}, timeout=30) as http:
            async with MemoryClient(settings) as client:
                for seq, text in enumerate(SESSION + ["Thanks, that is all.", "You are welcome."]):
                    await client.append_message(
                        tenant_id="tenant-a", conversation_id="life", user_id="alice", subject_id="grandpa",
                        seq=seq, role="user" if seq % 2 == 0 else "assistant", content=text,
                    )

            async def extracted() -> bool:
                return any("Lisbon" in content for content in await facts_of(http))

            await wait_until(extracted, 120, f"facts from the live worker (log {live.log_path})")
            before = await facts_of(http)
            lisbon = next(fact_id for content, fact_id in before.items() if "Lisbon" in content)
            deleted = await http.delete(f"/v1/facts/{lisbon}", headers={"X-User-Id": "alice"},
                                        params={"wait": "true", "wait_ms": 20000})
            assert deleted.status_code == 202, deleted.text
            assert "Lisbon" not in " ".join(await facts_of(http))

            env = settings_env(settings) | FACTS_ONLY
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "memory_agent.cli", "replay", "start", "--generation", f2, "--detach",
                env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await process.communicate()
            assert process.returncode == 0, out.decode()
            try:
                await caught_up(settings, f2)

                async def replayed() -> bool:
                    """Every fact extracted again and the owner's deletion applied to it (the
                    facts projector may start after the generation's progress says caught up)."""
                    import psycopg

                    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn) as conn:
                        row = await (await conn.execute(
                            f"SELECT count(*), count(*) FILTER (WHERE deleted_at IS NULL AND valid_to IS NULL)"
                            f" FROM gen_{f2}.facts")).fetchone()
                    return row[0] >= len(before) and row[1] == len(before) - 1

                await wait_until(replayed, 120, "the replay's facts, the deleted one deleted again")
                activate = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "memory_agent.cli", "generations", "activate", f2, env=env,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                )
                out, _ = await activate.communicate()
                assert activate.returncode == 0, out.decode()
                await serving(http, f2)
                after = await facts_of(http)
                assert (await http.get("/readyz")).json()["generation"] == f2
                assert "Lisbon" not in " ".join(after)
                assert set(after) == set(before) - {c for c in before if "Lisbon" in c}
            finally:
                replays.stop_worker(settings.model_copy(update={"state_dir": _state_dir(settings)}), f2)

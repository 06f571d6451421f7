"""Lineage on the real stack (docs/lineage.md): worker (Kafka, faust, projectors), an LLM and
embedding server over HTTP, PostgreSQL, the API over HTTP and the `explain` CLI as a process."""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
import psycopg
import pytest

from domain.lineage import version_of
from runtime.client import MemoryClient
from tests.integration.conftest import SEALING, running_api, settings_env, wait_until, sealed_variant, worker_process
from tests.support.topic_reader import topic_residue
from tests.integration.test_facts_capture import SMALL_CHUNKS, rows
from tests.support.fake_openai import FakeOpenAI, RecordedRequest

LINES = ["I live in Lisbon with my family.", "Lovely city.", "My daughter Ana plays the piano.", "Wonderful.",
         "Tell me more.", "Sure.", "Bye for now."]  # seqs 0-6: the 7th message triggers chunk 0-3
LISBON = "The user lives in Lisbon."
EDITED = "The user lives in Lisbon, near the river."
QUERY = "Where does the user live?"


def model(request: RecordedRequest) -> dict:
    if "worth_remembering" in request.user_content:
        return {"worth_remembering": True, "reason": "scripted"}
    if "Lisbon" in request.user_content and "facts" in request.user_content:
        return {"summary": "About home.", "facts": [{"category": "other", "content": LISBON, "importance": 5}]}
    return {"summary": "Nothing.", "facts": []}


async def say(client: MemoryClient, seqs: range, lines: list[str], user: str = "alice", conversation: str = "conv-a"):
    for seq, text in zip(seqs, lines):
        await client.append_message(tenant_id="tenant-a", conversation_id=conversation, user_id=user,
                                    subject_id="home", seq=seq, role="user" if seq % 2 == 0 else "assistant",
                                    content=text)


# Every wall-clock time the "as of" rebuild could compare (see the clock skew case).
SKEWED = {"messages": ["projected_at"], "memory": ["created_at", "completed_at", "updated_at"],
          "facts": ["created_at"], "conversation_chunks": ["created_at"], "topic_activations": ["projected_at"],
          "topic_compactions": ["projected_at"], "topic_assignments": ["projected_at"]}


async def until(settings, sql: str, params=(), what: str = "", log_path: str = "", timeout: float = 120) -> list:
    found: list = []

    async def check() -> bool:
        found[:] = await rows(settings, sql, params)
        return bool(found)
    try:
        await wait_until(check, timeout, what)
    except AssertionError:
        raise AssertionError(f"{what}; worker log:\n" + (open(log_path).read()[-3000:] if log_path else "")) from None
    return found


async def explain(settings, base: str, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", "explain", *args, "--url", base, "--api-key", "key-a",
        env=settings_env(settings), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode, out.decode()


@pytest.mark.asyncio
@SEALING
async def test_lineage_walks_back_and_forth_and_a_past_turn_is_rebuilt_as_it_was_served(settings, sealed):
    settings = sealed_variant(settings, sealed)
    with FakeOpenAI(json_responder=model) as fake:
        env = fake.env(llm=True, embeddings=True) | SMALL_CHUNKS
        api_settings = settings.model_copy(update={"embedding": fake.embedding_settings()})
        async with worker_process(settings, extra_env=env) as worker, running_api(api_settings) as base:
            async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": "key-a"}, timeout=60) as http:
                async with MemoryClient(settings) as client:
                    await say(client, range(7), LINES)
                    await say(client, range(2), ["I live in Porto.", "Nice."], user="bob", conversation="conv-b")
                log = worker.log_path
                [(fact_id, chunk_id)] = await until(
                    settings, "SELECT fact_id, source_chunk_id FROM facts WHERE content = %s", (LISBON,),
                    "the fact extracted", log)
                [(memory_id, start, end)] = (await until(
                    settings, "SELECT memory_id, start_sequence, end_sequence FROM memory WHERE conversation_id"
                    " = 'conv-a' AND status = 'completed' ORDER BY memory_id DESC", (), "a summary", log))[:1]
                [(topic_id,)] = await until(settings, "SELECT topic_id FROM topic_assignments WHERE conversation_id"
                                            " = 'conv-a' AND seq = 0", (), "message 0 in a topic", log)
                events = dict(await rows(settings, "SELECT seq, event_id FROM messages WHERE conversation_id = 'conv-a'"))

                # A turn is served and recorded: turn 7 (after seq 6).
                served = await http.get("/v1/conversations/conv-a/context", params={"query": QUERY})
                assert served.status_code == 200, served.text
                served = served.json()
                retrieved = {(i["kind"], i["id"]): i for i in served["retrieved"]["items"]}
                assert ("fact", fact_id) in retrieved, served["retrieved"]
                [(payload, turn_seq, user)] = await until(
                    settings, "SELECT payload, turn_seq, user_id FROM served_contexts WHERE conversation_id = 'conv-a'",
                    (), "the served context projected", log)
                assert (turn_seq, user) == (7, "alice")
                if sealed:  # no topic holds the fact, the summary source or the served query in clear
                    for text in ("Lisbon", QUERY):
                        assert await topic_residue(settings, text, raw=True) == {}, text
                    assert settings.kafka.memory_topic(settings.generation) in await topic_residue(settings, LISBON)
                assert payload["gap_seqs"] == [m["seq"] for m in served["messages"]]
                assert (payload["summary"] or {}).get("memory_id") == (served["summary"] or {}).get("memory_id")
                assert {(i["kind"], i["id"]): i["version"] for i in payload["retrieved"]} == {
                    key: version_of(item["content"]) for key, item in retrieved.items()}
                assert payload["watermark"]["last_seq"] == 6 and payload["query"] == QUERY

                # Fact -> its chunk -> messages 0..3 (with their event ids), and the turn that used it.
                fact = (await http.get(f"/v1/memories/fact/{fact_id}/lineage")).json()
                assert fact["via"][0]["id"] == chunk_id and fact["prompt_version"] and fact["model"] == "fake-llm"
                assert [(m["seq"], m["event_id"]) for m in fact["sources"]] == [(s, events[s]) for s in range(4)]
                assert [s["turn_seq"] for s in fact["served_in"]] == [7]
                chunk = (await http.get(f"/v1/memories/chunk/{chunk_id}/lineage")).json()
                assert [m["seq"] for m in chunk["sources"]] == [0, 1, 2, 3]
                assert [d["id"] for d in chunk["derived"]] == [fact_id]
                assert chunk["embedding_model"] == "fake-embedding"
                summary = (await http.get(f"/v1/memories/summary/conv-a:{memory_id}/lineage")).json()
                assert [m["seq"] for m in summary["sources"]] == list(range(start, end + 1))
                assert summary["model"] == "fake-llm"
                topic = await http.get(f"/v1/memories/topic/{topic_id}/lineage")
                assert topic.status_code == 200, topic.text
                topic = topic.json()
                assert 0 in [m["seq"] for m in topic["sources"]] and 0 in topic["item"]["message_seqs"]
                # ... and forward from message 0 to everything derived from it.
                message = (await http.get("/v1/memories/message/conv-a:0/lineage")).json()
                derived = {(d["kind"], d["id"]) for d in message["derived"]}
                assert {("chunk", chunk_id), ("fact", fact_id), ("topic", topic_id),
                        ("message_embedding", "conv-a:0")} <= derived
                assert (("summary", f"conv-a:{memory_id}") in derived) == (start == 0)
                assert message["sources"][0]["event_id"] == events[0]

                # Another user never sees alice's items, nor does alice see bob's conversation.
                bob = {"X-User-Id": "bob"}
                for path in (f"fact/{fact_id}", f"chunk/{chunk_id}", "message/conv-a:0", f"summary/conv-a:{memory_id}",
                             f"topic/{topic_id}"):
                    answer = await http.get(f"/v1/memories/{path}/lineage", headers=bob)
                    assert answer.status_code == 404, (path, answer.text)
                alice = {"X-User-Id": "alice"}
                assert (await http.get("/v1/memories/message/conv-b:0/lineage", headers=alice)).status_code == 404
                assert (await http.get("/v1/memories/message/conv-b:0/lineage", headers=bob)).status_code == 200
                other_tenant = await http.get(f"/v1/memories/fact/{fact_id}/lineage",
                                              headers={"X-API-Key": "key-b", "X-User-Id": "alice"})
                assert other_tenant.status_code == 404
                assert (await http.get("/v1/memories/message/conv-a/lineage")).status_code == 422

                # Shared with bob: he sees the fact's lineage, not alice's messages behind it.
                share = await http.patch(f"/v1/facts/{fact_id}/visibility", json={"visibility": "shared"},
                                         params={"wait": "true", "wait_ms": 20000}, headers=alice)
                assert share.status_code == 202, share.text
                shared = (await http.get(f"/v1/memories/fact/{fact_id}/lineage", headers=bob)).json()
                assert shared["sources"] == [] and shared["sources_withheld"] == 4 and shared["via"] == []
                assert shared["served_in"] == []  # alice's turns are not bob's

                # Memory changes later: the fact is edited, more messages arrive.
                edited = await http.patch(f"/v1/facts/{fact_id}", json={"content": EDITED},
                                          params={"wait": "true", "wait_ms": 20000}, headers={"X-User-Id": "alice"})
                assert edited.status_code == 202 and edited.json()["projected"], edited.text
                async with MemoryClient(settings) as client:
                    await say(client, range(7, 9), ["Any plans for the weekend?", "Maybe the beach."])
                await until(settings, "SELECT 1 FROM messages WHERE conversation_id = 'conv-a' AND seq = 8")

                # Turn 7 rebuilt: as it was served (the fact's old wording), and it says so.
                past = (await http.get("/v1/conversations/conv-a/context", params={"as_of_seq": 7})).json()
                assert past["as_of"]["matches"] is True, past["as_of"]
                assert past["as_of"]["recorded_event_id"] and past["as_of"]["differences"] == []
                assert past["as_of"]["note"] is None
                assert [m["seq"] for m in past["messages"]] == payload["gap_seqs"]
                [item] = [i for i in past["retrieved"]["items"] if i["id"] == fact_id]
                assert item["content"] == LISBON and past["watermark"]["last_seq"] == 6
                now = (await http.get(f"/v1/facts/{fact_id}", headers={"X-User-Id": "alice"})).json()
                assert now["content"] == EDITED
                # A turn nobody was served is rebuilt too, with nothing to compare.
                unrecorded = (await http.get("/v1/conversations/conv-a/context", params={"as_of_seq": 8})).json()
                assert unrecorded["as_of"]["matches"] is None and 7 in [m["seq"] for m in unrecorded["messages"]]

                # The CLI: a turn with each item's lineage, and one item.
                code, out = await explain(settings, base, "conv-a", "7")
                assert code == 0, out
                assert "matches the recorded context" in out and f"fact {fact_id}" in out
                assert f"<- message conv-a:0 user" in out and events[0] in out
                assert f"(changed since: now the line below): {LISBON!r}" in out  # served wording, then today's
                code, out = await explain(settings, base, "fact", fact_id, "--json", "--user", "alice")
                assert code == 0, out
                assert json.loads(out)["via"][0]["id"] == chunk_id
                # Past the 4-message chunk, to the message the fact came from ("I live in Lisbon ...").
                assert json.loads(out)["origin"][0]["seq"] == 0, json.loads(out)["origin"]
                code, out = await explain(settings, base, "fact", fact_id)
                assert code == 0 and f"<= came from message conv-a:0 user" in out, out
                code, out = await explain(settings, base, "message", "conv-a:0", "--user", "bob")
                assert code == 1 and "404" in out and "not found" in out

                # Deleted later: turn 7 still rebuilds as served, and explain says the fact is gone.
                deleted = await http.delete(f"/v1/facts/{fact_id}", params={"wait": "true", "wait_ms": 20000},
                                            headers=alice)
                assert deleted.status_code == 202, deleted.text
                past = (await http.get("/v1/conversations/conv-a/context", params={"as_of_seq": 7})).json()
                assert past["as_of"]["matches"] is True, past["as_of"]
                assert [i["content"] for i in past["retrieved"]["items"] if i["id"] == fact_id] == [LISBON]
                assert (await http.get(f"/v1/memories/fact/{fact_id}/lineage", headers=alice)).status_code == 404
                code, out = await explain(settings, base, "conv-a", "7")
                assert code == 0, out
                assert f"fact {fact_id}: no longer in your memory" in out and f"{LISBON!r}" in out

                # Clock skew: PostgreSQL's clock an hour ahead of the API's, so every row's wall-clock
                # time is after the recorded serving time. The rebuild compares projection clock
                # positions (recorded with the turn), not times: turn 7 still rebuilds as served.
                assert past["as_of"]["position"] == payload["clock"]["position"] > 0, (past["as_of"], payload)
                async with await psycopg.AsyncConnection.connect(
                        settings.postgres.dsn, autocommit=True, options=f"-c search_path={settings.pg_schema}") as conn:
                    for table, columns in SKEWED.items():
                        await conn.execute(f"UPDATE {table} SET " + ", ".join(
                            f"{c} = {c} + interval '1 hour'" for c in columns))
                skewed = (await http.get("/v1/conversations/conv-a/context", params={"as_of_seq": 7})).json()
                assert skewed["as_of"]["matches"] is True, skewed["as_of"]
                assert [i["content"] for i in skewed["retrieved"]["items"] if i["id"] == fact_id] == [LISBON]
                # A record without a position (made before the clock, or by another generation) is
                # compared by time: under the skew nothing was projected by then, and it says so.
                async with await psycopg.AsyncConnection.connect(
                        settings.postgres.dsn, autocommit=True, options=f"-c search_path={settings.pg_schema}") as conn:
                    await conn.execute("UPDATE served_contexts SET payload = payload - 'clock'")
                by_time = (await http.get("/v1/conversations/conv-a/context", params={"as_of_seq": 7})).json()
                assert by_time["as_of"]["position"] is None and by_time["as_of"]["matches"] is False, by_time["as_of"]
                assert by_time["messages"] == [] and by_time["summary"] is None, by_time

                # Were this generation built after such a turn (a replay), the rebuild says why it may differ.
                async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
                    await conn.execute("UPDATE public.memory_generations SET created_at = now()"
                                       " WHERE topic_prefix = %s", (settings.kafka.topic_prefix,))
                past = (await http.get("/v1/conversations/conv-a/context", params={"as_of_seq": 7})).json()
                assert "rebuilt by generation" in past["as_of"]["note"], past["as_of"]

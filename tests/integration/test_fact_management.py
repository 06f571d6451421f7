"""Fact management over real HTTP, Kafka and PostgreSQL: ownership, sharing, edits, deletion, replay."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import psycopg
import pytest
import numpy as np
import orjson
from aiokafka import AIOKafkaConsumer

from runtime.client import MemoryClient
from projections.generations import activate
from projections.migrate import migrate
from schemas import facts_events as fe
from schemas.codec import new_event
from runtime.kafka_topics import ensure_topics
from tests.integration.conftest import running_api, scalar, wait_until, worker_process
from tests.integration.test_facts_capture import SMALL_CHUNKS, rows, say_session, wait_for_chunks
from tests.support.fake_openai import FakeOpenAI, RecordedRequest, hashed_embedding

ALICE = ["Grandpa was a carpenter.", "Really?", "He loved fishing, and he was born in Braga.", "Lovely."]
BOB = ["I learned to swim with grandpa at the lake every summer.", "Nice memory.", "He was patient.", "Indeed."]
FACTS = {  # first answer; a replay's model words them differently and lists them in another order
    "Grandpa was a carpenter.": [("occupation", "Grandpa worked as a carpenter.", "Grandpa worked as a carpenter!"),
                                 ("hobby", "Grandpa loved fishing.", "Grandpa loved fishing!!"),
                                 ("milestone", "Grandpa was born in Braga.", "Grandpa was born in Braga, Portugal.")],
    BOB[0]: [("other", "Grandpa taught Bob to swim.", "Grandpa taught Bob to swim.")],
}
EDITED = "Grandpa loved fly fishing in the Minho river."


class Model:
    def __init__(self) -> None:
        self.replaying = False

    def __call__(self, request: RecordedRequest) -> dict:
        first = next(line for line in FACTS if line in request.user_content)
        facts = [{"category": c, "content": reworded if self.replaying else content}
                 for c, content, reworded in FACTS[first]]
        return {"summary": f"About: {first}", "facts": facts[::-1] if self.replaying else facts}


def as_user(user: str) -> dict:
    return {"X-User-Id": user}


async def listing(http: httpx.AsyncClient, user: str) -> dict[str, tuple]:
    response = await http.get("/v1/facts", params={"subject_id": "grandpa"}, headers=as_user(user))
    assert response.status_code == 200, response.text
    return {f["content"]: (f["owner_user_id"], f["visibility"], f["mine"]) for f in response.json()["facts"]}


async def fact_id_of(http: httpx.AsyncClient, user: str, content: str) -> str:
    response = await http.get("/v1/facts", params={"subject_id": "grandpa"}, headers=as_user(user))
    return next(f["fact_id"] for f in response.json()["facts"] if f["content"] == content)


async def decide(http, method: str, path: str, user: str, body: dict | None = None) -> dict:
    response = await http.request(method, path, json=body, params={"wait": "true", "wait_ms": 20000},
                                  headers=as_user(user))
    assert response.status_code == 202, response.text
    assert response.json()["projected"] is True, response.text
    return response.json()


@contextlib.asynccontextmanager
async def generation(settings, fake: FakeOpenAI):
    """A worker and an API on `settings`' generation, with alice's and bob's sessions recorded."""
    # No LLM result cache: the replay's model must really be asked (it words facts differently).
    env = fake.env(llm=True, embeddings=True) | SMALL_CHUNKS | {"MEMORY_LLM__CACHE_ENABLED": "false"}
    api_settings = settings.model_copy(update={"embedding": fake.embedding_settings()})
    async with worker_process(settings, extra_env=env) as worker, running_api(api_settings) as base:
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": "key-a"}, timeout=30) as http:
            yield worker, http


@pytest.mark.asyncio
async def test_owners_manage_facts_others_see_only_what_is_shared_and_a_replay_keeps_it(settings):
    model = Model()
    with FakeOpenAI(json_responder=model) as fake:
        async with generation(settings, fake) as (worker, http):
            async with MemoryClient(settings) as client:
                await say_session(client, "alice-1", user="alice", lines=ALICE)
                await say_session(client, "bob-1", user="bob", lines=BOB)
            await wait_for_chunks(settings, 2, worker.log_path)
            carpenter = await fact_id_of(http, "alice", "Grandpa worked as a carpenter.")
            fishing = await fact_id_of(http, "alice", "Grandpa loved fishing.")
            braga = await fact_id_of(http, "alice", "Grandpa was born in Braga.")

            # Private by default: bob sees only his own fact, and nothing of alice's by id.
            assert await listing(http, "bob") == {"Grandpa taught Bob to swim.": ("bob", "private", True)}
            assert len(await listing(http, "alice")) == 3
            assert (await http.get(f"/v1/facts/{carpenter}", headers=as_user("bob"))).status_code == 404
            response = await http.patch(f"/v1/facts/{carpenter}/visibility", json={"visibility": "shared"},
                                        headers=as_user("bob"))
            assert response.status_code == 404

            # Shared: bob sees it, but cannot change it.
            shared = await decide(http, "PATCH", f"/v1/facts/{carpenter}/visibility", "alice", {"visibility": "shared"})
            assert shared["fact"]["visibility"] == "shared"
            assert (await listing(http, "bob"))["Grandpa worked as a carpenter."] == ("alice", "shared", False)
            assert (await http.get(f"/v1/facts/{carpenter}", headers=as_user("bob"))).status_code == 200
            for method, path, body in [("PATCH", "", {"content": "x"}), ("DELETE", "", None),
                                       ("PATCH", "/visibility", {"visibility": "private"})]:
                response = await http.request(method, f"/v1/facts/{carpenter}{path}", json=body, headers=as_user("bob"))
                assert response.status_code == 403, (method, path, response.text)

            # Unshared: gone for bob again.
            await decide(http, "PATCH", f"/v1/facts/{carpenter}/visibility", "alice", {"visibility": "private"})
            assert "Grandpa worked as a carpenter." not in await listing(http, "bob")
            assert (await http.get(f"/v1/facts/{carpenter}", headers=as_user("bob"))).status_code == 404

            # Edit, then share the edited fact; delete another.
            edited = await decide(http, "PATCH", f"/v1/facts/{fishing}", "alice", {"content": EDITED})
            assert edited["fact"]["content"] == EDITED and edited["fact"]["fact_id"] == fishing
            await decide(http, "PATCH", f"/v1/facts/{fishing}/visibility", "alice", {"visibility": "shared"})
            await decide(http, "DELETE", f"/v1/facts/{braga}", "alice")
            assert (await http.get(f"/v1/facts/{braga}", headers=as_user("alice"))).status_code == 404
            expected_alice = {"Grandpa worked as a carpenter.": ("alice", "private", True),
                              EDITED: ("alice", "shared", True)}
            expected_bob = {"Grandpa taught Bob to swim.": ("bob", "private", True), EDITED: ("alice", "shared", False)}
            assert await listing(http, "alice") == expected_alice
            assert await listing(http, "bob") == expected_bob
            assert await rows(settings, "SELECT change FROM fact_history WHERE fact_id = %s AND change <> 'decision'"
                                        " ORDER BY id", (fishing,)) == [("extracted",), ("edited",), ("shared",)]
            assert await scalar(settings, "SELECT deleted_at IS NOT NULL FROM facts WHERE fact_id = %s", (braga,))
            stored = orjson.loads(await scalar(settings, "SELECT embedding::text FROM facts WHERE fact_id = %s",
                                               (fishing,)))
            assert float(np.dot(stored, hashed_embedding(EDITED, 384))) > 0.999  # the new wording's vector

            # Bad requests: another tenant, no acting user, a malformed user id.
            other = await http.get(f"/v1/facts/{fishing}", headers={"X-API-Key": "key-b", **as_user("alice")})
            assert other.status_code == 404
            assert (await http.delete(f"/v1/facts/{carpenter}")).status_code == 400
            assert (await http.get("/v1/facts", headers=as_user("not a user"))).status_code == 422

            # A forged decision in the log (bob acting on alice's fact) is refused by the projector.
            async with MemoryClient(settings) as client:
                forged = new_event(fe.FACT_DELETED, fe.FactDeleted(fact_id=carpenter, owner_user_id="alice",
                                                                   content_snapshot="x"),
                                   tenant_id="tenant-a", conversation_id="alice-1", user_id="bob")
                await client.append(forged)
            await wait_for_dead_letter(settings, forged.event_id)
            assert await listing(http, "alice") == expected_alice

        # Replay: a new generation over the same log, with a model that words and orders the facts
        # differently. The owners' decisions find the re-extracted facts (docs/facts.md's rule).
        model.replaying = True
        replay = settings.model_copy(update={"generation": settings.generation[:20] + "r"})
        await asyncio.to_thread(migrate, replay)
        await ensure_topics(replay)
        try:
            async with generation(replay, fake) as (worker, http):
                await wait_for_chunks(replay, 2, worker.log_path)
                await wait_until(lambda: decisions(replay, 5), 30, "the replay's decisions")
                await asyncio.to_thread(_activate, replay)  # the API reads the active generation
                await asyncio.sleep(1.2)
                assert await listing(http, "alice") == {"Grandpa worked as a carpenter!": ("alice", "private", True),
                                                        EDITED: ("alice", "shared", True)}
                assert await listing(http, "bob") == expected_bob
                deleted = await rows(replay, "SELECT content FROM facts WHERE deleted_at IS NOT NULL")
                assert deleted == [("Grandpa was born in Braga, Portugal.",)]
        finally:
            async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{replay.pg_schema}" CASCADE')


def _activate(settings) -> None:
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        activate(conn, settings.kafka.topic_prefix, settings.generation)


async def decisions(settings, count: int) -> bool:
    return await scalar(settings, "SELECT count(*) FROM fact_decisions") >= count


async def wait_for_dead_letter(settings, event_id: str) -> None:
    consumer = AIOKafkaConsumer(settings.kafka.dead_letter_topic, bootstrap_servers=settings.kafka.bootstrap_servers,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while asyncio.get_running_loop().time() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    if event_id.encode() in record.value and b'"not_owner"' in record.value:
                        return
        raise AssertionError(f"no not_owner dead letter for {event_id}")
    finally:
        await consumer.stop()

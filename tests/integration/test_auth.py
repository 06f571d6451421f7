"""Who acts comes from the key; reads are bounded; the API heals and says what is down (real HTTP + PostgreSQL)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from datetime import UTC, datetime

import httpx
import psycopg
import pytest

from core.settings import ApiSettings, KafkaSettings, PostgresSettings
from runtime.kafka_topics import ensure_topics
from tests.integration.conftest import free_port, running_api, running_projectors

KEYS = {
    "svc-owner": {"tenant": "tenant-a"},  # the default scope: each conversation's owner
    "svc-any": {"tenant": "tenant-a", "act_as": "any_user", "name": "review-ui"},
    "producer": {"tenant": "tenant-a", "act_as": "nobody"},
    "sha256:" + hashlib.sha256(b"alice-secret").hexdigest(): {"tenant": "tenant-a", "user": "alice"},
    "bob-key": {"tenant": "tenant-a", "user": "bob"},
    "other-tenant": {"tenant": "tenant-b", "act_as": "any_user"},
}
ALICE = {"X-API-Key": "alice-secret"}
BOB = {"X-API-Key": "bob-key"}


def with_keys(settings, **api):
    return settings.model_copy(update={"api": ApiSettings(api_keys=KEYS, **api)})


def connect(settings):
    return psycopg.AsyncConnection.connect(settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public")


async def conversation(settings, cid: str, user: str, texts: list[str], tenant: str = "tenant-a") -> None:
    now = datetime.now(UTC)
    async with await connect(settings) as conn:
        await conn.execute("INSERT INTO conversations (tenant_id, conversation_id, user_id, subject_id, last_seq,"
                           " message_count) VALUES (%s, %s, %s, NULL, %s, %s)",
                           (tenant, cid, user, len(texts) - 1, len(texts)))
        for seq, content in enumerate(texts):
            await conn.execute(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content,"
                " occurred_at, source_partition, source_offset) VALUES (%s,%s,%s,%s,%s,'user',%s,%s,0,%s)",
                (tenant, cid, seq, f"{tenant}-{cid}-{seq}", user, content, now, seq))


async def fact(settings, fact_id: str, owner: str, content: str, visibility: str = "private",
               tenant: str = "tenant-a") -> None:
    dims = settings.embedding.dimensions
    vector = "[" + ",".join(["0.1"] * dims) + "]"
    async with await connect(settings) as conn:
        await conn.execute(
            "INSERT INTO facts (fact_id, tenant_id, owner_user_id, subject_id, category, content, visibility,"
            " embedding, embedding_model, extracted_by, prompt_version, event_id)"
            " VALUES (%s, %s, %s, NULL, 'personal', %s, %s, %s::vector, %s, 'test', 'test', %s)",
            (fact_id, tenant, owner, content, visibility, vector, settings.embedding.model, f"e-{fact_id}"))


@pytest.mark.asyncio
async def test_the_acting_user_comes_from_the_key(settings, caplog):
    settings = with_keys(settings)
    await conversation(settings, "alice-chat", "alice", ["my pin is 4321", "noted"])
    await conversation(settings, "bob-chat", "bob", ["what did I tell you about my pin?"])
    await fact(settings, "alice-pin", "alice", "Alice's bank PIN is 4321")
    await fact(settings, "bob-dog", "bob", "Bob has a dog called Rex")
    caplog.set_level(logging.INFO, logger="memory_agent.audit")
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        # Issue 11: ?user_id=alice on Bob's conversation served Alice's PIN. Now refused...
        leak = await http.get("/v1/conversations/bob-chat/context", params={"user_id": "alice", "query": "pin"},
                              headers={"X-API-Key": "svc-owner"})
        assert leak.status_code == 403 and "4321" not in leak.text
        assert (await http.get("/v1/conversations/bob-chat/context", params={"user_id": "alice", "query": "pin"},
                               headers=BOB)).status_code == 403
        # ...and Bob's own context does not carry it.
        own = await http.get("/v1/conversations/bob-chat/context", params={"query": "pin"}, headers=BOB)
        assert own.status_code == 200 and "4321" not in own.text and "alice" not in own.text
        # A service key granted any_user may, and the act is logged with the key's name.
        granted = await http.get("/v1/conversations/bob-chat/context", params={"user_id": "alice", "query": "pin"},
                                 headers={"X-API-Key": "svc-any"})
        assert granted.status_code == 200
        assert any("key=review-ui" in r.getMessage() and "user=alice" in r.getMessage() for r in caplog.records)

        # A user key (hashed at rest) sees its own conversation and nothing of Bob's: history, topics, context.
        assert (await http.get("/v1/conversations/alice-chat/messages", headers=ALICE)).status_code == 200
        for path in ("/v1/conversations/bob-chat/messages", "/v1/conversations/bob-chat/context",
                     "/v1/conversations/bob-chat/topics"):
            response = await http.get(path, headers=ALICE)
            assert response.status_code == 404 and "pin?" not in response.text, path
        assert (await http.get("/v1/conversations/bob-chat/messages", headers=BOB)).status_code == 200

        # Facts: the key's user, never another's private fact; X-User-Id cannot widen it.
        mine = await http.get("/v1/facts", headers=ALICE)
        assert [f["fact_id"] for f in mine.json()["facts"]] == ["alice-pin"]
        assert (await http.get("/v1/facts", headers={**BOB, "X-User-Id": "alice"})).status_code == 403
        assert (await http.get("/v1/facts/alice-pin", headers=BOB)).status_code == 404
        assert (await http.get("/v1/facts", headers={"X-API-Key": "svc-owner", "X-User-Id": "alice"})).status_code == 403
        assert (await http.get("/v1/facts", headers={"X-API-Key": "svc-any"})).status_code == 400
        reviewed = await http.get("/v1/facts", headers={"X-API-Key": "svc-any", "X-User-Id": "bob"})
        assert [f["fact_id"] for f in reviewed.json()["facts"]] == ["bob-dog"]
        # Another tenant's key sees none of it.
        other = await http.get("/v1/facts", headers={"X-API-Key": "other-tenant", "X-User-Id": "alice"})
        assert other.json()["facts"] == []

        # A producer key writes but reads nobody's memory.
        assert (await http.get("/v1/conversations/bob-chat/context",
                               headers={"X-API-Key": "producer"})).status_code == 403
        # A user key appends only as itself, only to its own conversations (checked before the broker).
        wrong_user = await http.post("/v1/conversations/new-chat/messages", headers=ALICE,
                                     json={"user_id": "bob", "seq": 0, "role": "user", "content": "hi"})
        assert wrong_user.status_code == 403
        into_bobs = await http.post("/v1/conversations/bob-chat/messages", headers=ALICE,
                                    json={"user_id": "alice", "seq": 1, "role": "user", "content": "hi"})
        assert into_bobs.status_code == 403

        # No key, an empty key, the digest instead of the key: 401.
        for headers in ({}, {"X-API-Key": ""}, {"X-API-Key": next(k for k in KEYS if k.startswith("sha256:"))}):
            assert (await http.get("/v1/conversations/alice-chat/context", headers=headers)).status_code == 401


@pytest.mark.asyncio
async def test_hostile_min_seq_is_answered_at_once_and_never_starves_another_tenant(settings):
    # A small pool and long waits allowed: before the fix ten such requests held every connection.
    settings = with_keys(settings, max_wait_ms=60_000, tenant_max_connections=2, tenant_queue_ms=60_000)
    settings = settings.model_copy(update={"postgres": PostgresSettings(dsn=settings.postgres.dsn, pool_max_size=4)})
    await conversation(settings, "alice-chat", "alice", ["hello"] * 5)
    await conversation(settings, "b-chat", "carol", ["other tenant"], tenant="tenant-b")
    hostile = {"min_seq": 2**31 - 1, "wait_ms": 60_000}
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        one = await asyncio.wait_for(http.get("/v1/conversations/alice-chat/context", params=hostile,
                                              headers=ALICE), 30)
        assert one.status_code == 200, one.text
        watermark = one.json()["watermark"]
        assert watermark["complete"] is False and watermark["missing_seqs"][:2] == [5, 6]
        assert len(watermark["missing_seqs"]) == 1000  # listed up to a cap, computed without a series
        assert (await http.get("/v1/conversations/alice-chat/context", params={"min_seq": 2**31},
                               headers=ALICE)).status_code == 422

        # Ten hostile readers that do wait (min_seq just ahead) and another tenant's reader at the same time.
        waiting = {"min_seq": 10, "wait_ms": 3_000}
        storm = [asyncio.create_task(http.get("/v1/conversations/alice-chat/context", params=waiting, headers=ALICE))
                 for _ in range(10)]
        other = await asyncio.wait_for(http.get("/v1/conversations/b-chat/context",
                                                headers={"X-API-Key": "other-tenant"}), 30)
        assert other.status_code == 200 and other.json()["messages"][0]["content"] == "other tenant"
        answers = await asyncio.wait_for(asyncio.gather(*storm), 60)
        assert {a.status_code for a in answers} == {200}

        # An unknown conversation is a 404 at once, not after wait_ms.
        unknown = await asyncio.wait_for(http.get("/v1/conversations/nobody/context", params={"wait_ms": 60_000},
                                                  headers={"X-API-Key": "svc-owner"}), 30)
        assert unknown.status_code == 404


@pytest.mark.asyncio
async def test_an_unknown_conversation_with_min_seq_is_a_404_once_the_projection_holds_the_log(settings):
    """Read your writes without a 404 trap: a conversation whose first message is in the log but
    not projected yet is waited for; one the log does not have is a 404 without waiting out
    wait_ms (60 s here, the client gives up after 30)."""
    settings = with_keys(settings, max_wait_ms=60_000)
    await ensure_topics(settings)
    owner = {"X-API-Key": "svc-owner"}
    long_wait = {"min_seq": 0, "wait_ms": 60_000}
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        # No projector has run yet: the log is empty, so the projection holds all of it.
        unknown = await asyncio.wait_for(http.get("/v1/conversations/nobody/context", params=long_wait,
                                                  headers=owner), 30)
        assert unknown.status_code == 404, unknown.text
        posted = await http.post("/v1/conversations/fresh-chat/messages", headers=ALICE,
                                 json={"user_id": "alice", "seq": 0, "role": "user", "content": "first words"})
        assert posted.status_code == 202, posted.text
        # In the log, not projected: the request waits for it instead of answering 404 ...
        waiting = asyncio.create_task(http.get("/v1/conversations/fresh-chat/context", params=long_wait,
                                               headers=ALICE))
        await asyncio.sleep(1.0)
        assert not waiting.done(), waiting.result().text
        async with running_projectors(settings):
            answer = await asyncio.wait_for(waiting, 45)  # ... and gets it once it is projected
            assert answer.status_code == 200, answer.text
            assert [m["content"] for m in answer.json()["messages"]] == ["first words"]
            # Now the projection holds the log past this partition's messages: unknown is 404 at once.
            again = await asyncio.wait_for(http.get("/v1/conversations/nobody/context", params=long_wait,
                                                    headers=owner), 30)
            assert again.status_code == 404, again.text


@pytest.mark.asyncio
async def test_missing_seqs_are_the_gaps_and_the_tail(settings):
    settings = with_keys(settings)
    await conversation(settings, "gappy", "alice", [f"m{i}" for i in range(6)])
    async with await connect(settings) as conn:  # seqs 2, 3 never arrived
        await conn.execute("DELETE FROM messages WHERE conversation_id = 'gappy' AND seq IN (2, 3)")
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        body = (await http.get("/v1/conversations/gappy/context", params={"min_seq": 7, "wait_ms": 0},
                               headers=ALICE)).json()
        assert body["watermark"]["missing_seqs"] == [2, 3, 6, 7] and body["watermark"]["complete"] is False
        before = (await http.get("/v1/conversations/gappy/context", params={"min_seq": 7, "before_seq": 3,
                                                                            "wait_ms": 0}, headers=ALICE)).json()
        assert before["watermark"]["missing_seqs"] == [2]


@pytest.mark.asyncio
async def test_a_tenant_past_its_share_of_the_pool_gets_429_with_retry_after(settings):
    settings = with_keys(settings, max_wait_ms=5_000, tenant_max_connections=1, tenant_queue_ms=0)
    await conversation(settings, "alice-chat", "alice", ["hello"])
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        # Five readers that each hold a connection for up to 5 s, at once: one holds tenant-a's only
        # slot, the others are refused at once (no queue configured) and told when to retry.
        slow = [asyncio.create_task(http.get("/v1/conversations/alice-chat/context",
                                             params={"min_seq": 3, "wait_ms": 5_000}, headers=ALICE))
                for _ in range(5)]
        done, _ = await asyncio.wait(slow, return_when=asyncio.FIRST_COMPLETED, timeout=60)
        refused = next(iter(done)).result()
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
        # The other tenant is not affected by tenant-a's full share.
        assert (await http.get("/v1/facts", headers={"X-API-Key": "other-tenant", "X-User-Id": "x"})).status_code == 200
        codes = sorted(r.status_code for r in await asyncio.gather(*slow))
        assert codes[0] == 200 and codes[-1] == 429


@pytest.mark.asyncio
async def test_missing_seqs_in_one_statement_match_the_ones_computed_from_a_listing(settings):
    from projections.queries import list_messages, missing_in, missing_seqs

    now = datetime.now(UTC)
    async with await connect(settings) as conn:
        for seq in (0, 1, 3, 7, 8):  # gaps at 2 and 4-6
            await conn.execute(
                "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content,"
                " occurred_at, source_partition, source_offset) VALUES ('tenant-a', 'gappy', %s, %s, 'alice',"
                " 'user', 'x', %s, 0, %s)", (seq, f"gappy-{seq}", now, seq))
        listed = [m.seq for m in await list_messages(conn, "tenant-a", "gappy")]
        for after, up_to, limit in ((-1, 12, 1000), (3, 12, 1000), (-1, 8, 1000), (8, 2**31 - 1, 1000), (-1, 12, 3)):
            expected = missing_in(listed, up_to, after_seq=after, limit=limit)
            assert await missing_seqs(conn, "tenant-a", "gappy", up_to, after_seq=after, limit=limit) == expected
        assert await missing_seqs(conn, "tenant-a", "gappy", 12) == [2, 4, 5, 6, 9, 10, 11, 12]


async def holders(http, n: int) -> list[int]:
    """n readers of alice's conversation at once, each holding a pooled connection for up to 5 s
    (min_seq ahead of the projection); their status codes."""
    slow = [http.get("/v1/conversations/alice-chat/context", params={"min_seq": 3, "wait_ms": 5_000}, headers=ALICE)
            for _ in range(n)]
    return sorted(r.status_code for r in await asyncio.wait_for(asyncio.gather(*slow), 60))


@pytest.mark.asyncio
async def test_a_single_tenant_deployment_gets_the_whole_pool_by_default(settings):
    # The keys name one tenant: no share applies, eight readers at once on a pool of ten all get in
    # (with the old fixed share of 6 and no queue, two were refused with 429).
    one_tenant = {k: v for k, v in KEYS.items() if v["tenant"] == "tenant-a"}
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=one_tenant, max_wait_ms=5_000,
                                                              tenant_queue_ms=0)})
    await conversation(settings, "alice-chat", "alice", ["hello"])
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        assert await holders(http, 8) == [200] * 8


@pytest.mark.asyncio
async def test_with_several_tenants_the_default_share_keeps_one_from_starving_another(settings):
    # Two tenants configured, the default pool of ten: tenant-a may hold six connections at once.
    settings = with_keys(settings, max_wait_ms=5_000, tenant_queue_ms=0)
    await conversation(settings, "alice-chat", "alice", ["hello"])
    await conversation(settings, "b-chat", "carol", ["other tenant"], tenant="tenant-b")
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        storm = asyncio.create_task(holders(http, 9))
        # While tenant-a's share is full, tenant-b is answered.
        other = await asyncio.wait_for(http.get("/v1/conversations/b-chat/context",
                                                headers={"X-API-Key": "other-tenant"}), 30)
        assert other.status_code == 200 and other.json()["messages"][0]["content"] == "other tenant"
        assert await storm == [200] * 6 + [429] * 3


@pytest.mark.asyncio
async def test_readiness_names_the_dependency_that_is_down_and_ingest_answers_503_promptly(settings):
    dead_kafka = with_keys(settings, produce_timeout_s=2.0).model_copy(update={"kafka": KafkaSettings(
        bootstrap_servers=f"127.0.0.1:{free_port()}", topic_prefix=settings.kafka.topic_prefix)})
    async with running_api(dead_kafka) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        ready = await http.get("/readyz")
        assert ready.status_code == 503
        checks = ready.json()["checks"]
        assert checks["postgres"]["ok"] is True and checks["kafka"]["ok"] is False
        posted = await asyncio.wait_for(http.post(
            "/v1/conversations/c/messages", headers={"X-API-Key": "svc-owner"},
            json={"user_id": "u", "seq": 0, "role": "user", "content": "x"}), 30)
        assert posted.status_code == 503 and posted.headers["Retry-After"] == "1"

    dead_pg = with_keys(settings).model_copy(update={"postgres": PostgresSettings(
        dsn=f"postgresql://postgres@127.0.0.1:{free_port()}/memory_agent", pool_min_size=0)})
    async with running_api(dead_pg) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        ready = await http.get("/readyz")
        assert ready.status_code == 503
        checks = ready.json()["checks"]
        assert checks["postgres"]["ok"] is False and checks["kafka"]["ok"] is True
        down = await http.get("/v1/conversations/c/context", headers={"X-API-Key": "svc-owner"})
        assert down.status_code == 503 and "Retry-After" in down.headers


@pytest.mark.asyncio
async def test_a_pooled_connection_killed_by_the_server_is_replaced_before_use(settings):
    """What a PostgreSQL restart does to the pool, without restarting the shared server."""
    settings = with_keys(settings).model_copy(update={"postgres": PostgresSettings(
        dsn=settings.postgres.dsn, pool_min_size=1, pool_max_size=1)})
    await conversation(settings, "alice-chat", "alice", ["hello"])
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.get("/v1/conversations/alice-chat/messages", headers=ALICE)).status_code == 200
        async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as admin:
            cur = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = %s", (f"memory-agent-api/{settings.generation}",))
            assert (await cur.fetchall()), "the API's pooled connection was found"
        after = await http.get("/v1/conversations/alice-chat/messages", headers=ALICE)
        assert after.status_code == 200, after.text


@pytest.mark.asyncio
async def test_a_statement_past_the_timeout_is_cancelled_and_answered_503(settings):
    settings = with_keys(settings, statement_timeout_ms=300)
    await conversation(settings, "alice-chat", "alice", ["hello"])
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        async with await connect(settings) as locker:  # this test's schema only: nobody else waits
            await locker.execute("LOCK TABLE conversations IN ACCESS EXCLUSIVE MODE")
            blocked = await asyncio.wait_for(http.get("/v1/conversations/alice-chat/messages", headers=ALICE), 30)
            await locker.rollback()
        assert blocked.status_code == 503 and blocked.headers["Retry-After"] == "1"
        assert "statement timeout (300 ms)" in blocked.json()["detail"]
        assert (await http.get("/v1/conversations/alice-chat/messages", headers=ALICE)).status_code == 200


@pytest.mark.asyncio
async def test_clear_answers_for_malformed_requests(settings):
    settings = with_keys(settings)
    key = {"X-API-Key": "svc-owner"}
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        admin = settings.api.admin_keys[0]  # /metrics answers a scrape or admin key (test_side_channels.py)
        metrics = await http.get("/metrics", follow_redirects=False, headers={"Authorization": f"Bearer {admin}"})
        assert metrics.status_code == 200 and "python_gc_objects_collected_total" in metrics.text

        slash = await http.get("/v1/conversations/a%2Fb/context", headers=key)
        assert slash.status_code == 400 and "'/'" in slash.json()["detail"]
        dots = await http.get("/v1/conversations/%2E%2E/context", headers=key)
        assert dots.status_code == 400 and "'..'" in dots.json()["detail"]

        json_headers = {**key, "content-type": "application/json"}
        # The ingest endpoint refuses a bad body with the dead-letter topic's reason codes
        # (docs/backbone.md); other endpoints with a body answer 400 (api/errors.py).
        not_utf8 = await http.post("/v1/conversations/c/messages", headers=json_headers, content=b'{"a": "\xff"}')
        assert not_utf8.status_code == 422 and not_utf8.json()["detail"]["reason"] == "bad_utf8"
        assert "UTF-8" in not_utf8.json()["detail"]["message"]
        deep = await http.post("/v1/conversations/c/messages", headers=json_headers,
                               content=b"[" * 5000 + b"]" * 5000)
        assert deep.status_code == 422 and deep.json()["detail"]["reason"] == "not_json"
        patch_not_utf8 = await http.patch("/v1/facts/x", headers=json_headers, content=b'{"content": "\xff"}')
        assert patch_not_utf8.status_code == 400 and "UTF-8" in patch_not_utf8.json()["detail"]

        # One 422 shape: FastAPI's own validation errors look like the ingest endpoint's.
        bad_query = await http.get("/v1/conversations/c/context", headers=key, params={"min_seq": "x"})
        assert bad_query.status_code == 422
        assert bad_query.json()["detail"]["reason"] == "invalid_request"
        assert "min_seq" in bad_query.json()["detail"]["message"]
        extra = await http.post("/v1/conversations/c/messages", headers=key,
                                json={"user_id": "u", "seq": 0, "role": "user", "content": "x", "nope": 1})
        assert extra.status_code == 422 and set(extra.json()["detail"]) >= {"reason", "message"}

        wrong_method = await http.put("/v1/facts/x", headers=key)
        assert wrong_method.status_code == 405 and wrong_method.headers["Allow"] == "DELETE, GET, PATCH"
        nowhere = await http.get("/v1/nowhere", headers=key)
        assert nowhere.status_code == 404 and "/v1/nowhere" in nowhere.json()["detail"]

        spec = (await http.get("/openapi.json")).json()
        context = spec["paths"]["/v1/conversations/{conversation_id}/context"]["get"]["responses"]
        assert {"200", "400", "401", "403", "404", "422", "429", "503"} <= set(context)
        assert spec["components"]["securitySchemes"]["ApiKey"]["name"] == "X-API-Key"

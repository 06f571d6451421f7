"""What one caller may learn about another, and what the API refuses (issue 23, "Side channels and
scopes", and the ingest rules of issue 27): real HTTP against the real API on the shared Kafka and
PostgreSQL. docs/security.md describes each rule."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
import uvicorn
from api.access_log import http_routes
from api.app import create_app
from core.settings import ApiSettings
from tests.integration.conftest import free_port, running_api, scalar
from tests.integration.test_auth import ALICE, KEYS, conversation, fact

SCRAPER = "scrape-secret"
ADMIN = "ops-admin"
ANY = {"X-API-Key": "svc-any"}
OWNER = {"X-API-Key": "svc-owner"}
PRODUCER = {"X-API-Key": "producer"}


def secured(settings, **api):
    return settings.model_copy(update={"api": ApiSettings(api_keys=KEYS, admin_keys=[ADMIN], metrics_keys=[SCRAPER],
                                                          **api)})


@pytest.mark.asyncio
async def test_metrics_answer_only_a_scrape_key(settings):
    """The API's counters move with every tenant's requests (the embedding cache's hit counter
    told tenant B whether a user of tenant A ever wrote a sentence): no API key reads them."""
    settings = secured(settings)
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        for headers in ({}, {"X-API-Key": "other-tenant"}, {"Authorization": "Bearer other-tenant"},
                        {"Authorization": "Bearer svc-any"}, {"Authorization": "Basic " + SCRAPER},
                        {"Authorization": "Bearer wrong"}):
            refused = await http.get("/metrics", headers=headers)
            assert refused.status_code == 401, headers
            assert "memory_embedding_cache_texts_total" not in refused.text
            assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        for key in (SCRAPER, ADMIN):
            scraped = await http.get("/metrics", headers={"Authorization": f"Bearer {key}"})
            assert scraped.status_code == 200 and "memory_embedding_cache_texts_total" in scraped.text


@pytest.mark.asyncio
async def test_a_producer_key_reads_nothing(settings):
    settings = secured(settings)
    await conversation(settings, "alice-chat", "alice", ["my pin is 4321"])
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        for path in ("/v1/conversations", "/v1/stats", "/v1/ui/stats", "/v1/ui/throughput", "/v1/ui/conversations"):
            answer = await http.get(path, headers=PRODUCER)
            assert answer.status_code == 403, (path, answer.text)
            assert "alice" not in answer.text and "act_as: nobody" in answer.json()["detail"]
            assert (await http.get(path, headers=OWNER)).status_code == 200, path  # a service key still reads
        appended = await http.post("/v1/conversations/new-chat/messages", headers=PRODUCER,
                                   json={"user_id": "carol", "seq": 0, "role": "user", "content": "hi"})
        assert appended.status_code == 202  # it writes


@pytest.mark.asyncio
async def test_a_conversations_owner_is_fixed_by_its_first_message(settings):
    settings = secured(settings)
    await conversation(settings, "bob-chat", "bob", ["bob's first message"])
    message = {"user_id": "alice", "seq": 1, "role": "user", "content": "alice writes into bob's chat"}
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        for key in (OWNER, ANY, PRODUCER):
            refused = await http.post("/v1/conversations/bob-chat/messages", headers=key, json=message)
            assert refused.status_code == 409, refused.text
            assert refused.json()["detail"]["reason"] == "owner_conflict" and "'bob'" in refused.text
        # Only a key that may act for any user, saying so, adds another user's message.
        assert (await http.post("/v1/conversations/bob-chat/messages", params={"other_user": "true"}, headers=OWNER,
                                json=message)).status_code == 403
        assert (await http.post("/v1/conversations/bob-chat/messages", params={"other_user": "true"}, headers=ANY,
                                json=message)).status_code == 202
        # The owner's own messages and a new conversation are taken as before.
        assert (await http.post("/v1/conversations/bob-chat/messages", headers=OWNER,
                                json={**message, "user_id": "bob", "seq": 2})).status_code == 202


@pytest.mark.asyncio
async def test_ingest_refuses_empty_content_a_taken_seq_and_names_every_bad_field(settings):
    settings = secured(settings)
    await conversation(settings, "bob-chat", "bob", ["hello there", "general kenobi"])
    url = "/v1/conversations/bob-chat/messages"
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        for content in ("", "  \n\t"):
            empty = await http.post(url, headers=OWNER, json={"user_id": "bob", "seq": 2, "role": "user",
                                                              "content": content})
            assert empty.status_code == 422 and "content: is empty" in empty.json()["detail"]["message"]

        taken = await http.post(url, headers=OWNER, json={"user_id": "bob", "seq": 1, "role": "user",
                                                          "content": "another text at seq 1"})
        assert taken.status_code == 409 and taken.json()["detail"]["reason"] == "seq_conflict"
        assert "tenant-a-bob-chat-1" in taken.text  # the stored event
        # The same message again is no conflict: answered with the stored event, nothing appended.
        again = await http.post(url, headers=OWNER, json={"user_id": "bob", "seq": 1, "role": "user",
                                                          "content": "general kenobi"})
        assert again.status_code == 202 and again.json()["event_id"] == "tenant-a-bob-chat-1"

        several = await http.post(url, headers=OWNER, json={"user_id": "bad id!", "seq": -3, "role": "wizard",
                                                            "content": ""})
        assert several.status_code == 422
        fields = {tuple(e["loc"]) for e in several.json()["detail"]["errors"]}
        assert {("body", "user_id"), ("body", "seq"), ("body", "role"), ("body", "content")} <= fields, several.text
        nothing = await scalar(settings, "SELECT count(*) FROM messages WHERE conversation_id = 'bob-chat'")
        assert nothing == 2


@pytest.mark.asyncio
async def test_an_any_user_key_naming_a_user_acts_as_that_user(settings, caplog):
    settings = secured(settings)
    await conversation(settings, "u1-chat", "u1", ["u1's own words"])
    caplog.set_level(logging.INFO, logger="memory_agent.audit")
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        # The context route honours X-User-Id like ?user_id=: the named user's memory ...
        named = await http.get("/v1/conversations/u1-chat/context", headers={**ANY, "X-User-Id": "u2"})
        assert named.status_code == 200
        assert "user=u2 owner=u1 action=context" in caplog.text
        # ... and a key that acts only as the owner may not name another user.
        assert (await http.get("/v1/conversations/u1-chat/context",
                               headers={**OWNER, "X-User-Id": "u2"})).status_code == 403
        assert (await http.get("/v1/conversations/u1-chat/context", params={"user_id": "u3"},
                               headers={**ANY, "X-User-Id": "u2"})).status_code == 400
        # Naming u2 does not erase u1's conversation.
        erase = await http.delete("/v1/conversations/u1-chat", headers={**ANY, "X-User-Id": "u2"})
        assert erase.status_code == 403 and "does not belong to user 'u2'" in erase.text
        assert await scalar(settings, "SELECT count(*) FROM erasure_requests") == 0  # nothing appended
        erased = await http.delete("/v1/conversations/u1-chat", headers={**ANY, "X-User-Id": "u1"})
        assert erased.status_code == 202 and erased.json()["id"] == "u1-chat"


@pytest.mark.asyncio
async def test_repeated_erasures_of_one_user_collapse_onto_the_one_in_flight(settings):
    settings = secured(settings)
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        answers = await asyncio.gather(*(http.delete("/v1/users/alice", headers=ALICE) for _ in range(40)))
        accepted = [a.json() for a in answers if a.status_code == 202]
        assert {a.status_code for a in answers} <= {202, 429}, {a.status_code: a.text for a in answers}
        assert accepted and len({a["event_id"] for a in accepted}) == 1, accepted  # one erasure appended
        assert sum(not a["already_requested"] for a in accepted) == 1
        first = accepted[0]["event_id"]
        # Once that erasure is applied, a new request runs again (the user may have written since).
        async with await __import__("psycopg").AsyncConnection.connect(
                settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
            await conn.execute("INSERT INTO erasures (event_id, tenant_id, kind, erased_user_id, requested_by,"
                               " requested_at) VALUES (%s, 'tenant-a', 'user', 'alice', 'alice', now())", (first,))
        later = await http.delete("/v1/users/alice", headers=ALICE)
        assert later.status_code == 202 and later.json()["event_id"] != first
        assert not later.json()["already_requested"]


@pytest.mark.asyncio
async def test_a_nul_in_any_id_or_query_is_a_clear_4xx_on_every_route(settings):
    settings = secured(settings)
    await conversation(settings, "alice-chat", "alice", ["hello"])
    await fact(settings, "alice-fact", "alice", "Alice likes tea")
    app = create_app(settings)
    routes = [r for r in http_routes(app.routes) if r.methods and getattr(r, "dependant", None) is not None]
    with_ids, with_queries = 0, 0
    async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        headers = {**ANY, "X-User-Id": "alice", "X-Admin-Key": ADMIN, "Authorization": f"Bearer {SCRAPER}"}
        for route in routes:
            for method in sorted(route.methods - {"HEAD"}):
                names = list(route.param_convertors)
                for poisoned in names:  # each path parameter in turn holds a NUL
                    path = route.path
                    for name in names:
                        path = path.replace("{" + name + "}", "a%00b" if name == poisoned else "fact")
                    answer = await http.request(method, path, headers=headers, json={})
                    assert answer.status_code == 422, (method, path, answer.text)
                    assert answer.json()["detail"]["errors"][0]["loc"] == ["path"] and "NUL" in answer.text
                    with_ids += 1
                concrete = route.path
                for name in names:
                    concrete = concrete.replace("{" + name + "}", "alice-chat" if "conversation" in name else "fact")
                for param in route.dependant.query_params:
                    answer = await http.request(method, concrete, params={param.alias: "a\x00b"}, headers=headers,
                                                json={})
                    assert answer.status_code == 422, (method, concrete, param.alias, answer.text)
                    assert answer.json()["detail"]["errors"][0]["loc"] == ["query", param.alias]
                    with_queries += 1
        # The cases among them: the context's query no longer answers 200 with nothing retrieved.
        context = await http.get("/v1/conversations/alice-chat/context", params={"query": "a\x00b"}, headers=ANY)
        assert context.status_code == 422
        assert await scalar(settings, "SELECT count(*) FROM served_contexts") == 0
        for url in ("/v1/facts/a%00b", "/v1/memories/topic/a%00b/lineage"):
            assert (await http.get(url, headers=headers)).status_code == 422
        # A NUL in a body's text that reaches PostgreSQL is the caller's input too (never a 500).
        patched = await http.patch("/v1/facts/alice-fact", headers={**ANY, "X-User-Id": "alice"},
                                   json={"content": "tea\x00time"})
        assert 400 <= patched.status_code < 500, patched.text
    assert with_ids >= 13 and with_queries >= 20, (with_ids, with_queries)


@pytest.mark.asyncio
async def test_docs_pages_carry_csp_and_frame_headers(settings):
    async with running_api(secured(settings)) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            answer = await http.get(page)
            csp = answer.headers.get("Content-Security-Policy", "")
            assert answer.status_code == 200 and "frame-ancestors 'none'" in csp, page
            assert "default-src 'self'" in csp and "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
            assert answer.headers["X-Frame-Options"] == "DENY" and answer.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.asyncio
async def test_the_access_log_keeps_route_templates_not_ids_or_queries(settings):
    settings = secured(settings)
    await conversation(settings, "alice-chat", "alice", ["hello"])
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="info"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    handler = Collect()
    logging.getLogger("uvicorn.access").addHandler(handler)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            await http.get("/v1/conversations/alice-chat/context", params={"query": "my secret diagnosis"},
                           headers=ANY)
            await http.delete("/v1/users/alice", headers=ALICE)
            await http.get("/no/such/secretpath")
    finally:
        logging.getLogger("uvicorn.access").removeHandler(handler)
        server.should_exit = True
        await asyncio.wait_for(task, 10)
    text = "\n".join(lines)
    assert "/v1/conversations/{conversation_id}/context" in text and "/v1/users/{user_id}" in text, text
    for secret in ("secret", "diagnosis", "alice", "query="):
        assert secret not in text, text

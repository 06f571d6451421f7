"""The HTTP service layer of issue 13 over real HTTP, PostgreSQL and Kafka: search, stored
memories (an event in the log, projected through dedup), export, conversations, summaries,
stats, dead letters, offline API docs and /metrics."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from datetime import UTC, datetime, timedelta

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer

from core.settings import ApiSettings
from projections.migrate import migrate
from runtime.kafka_topics import ensure_topics
from tests.integration.conftest import API_KEYS, running_api, running_projectors, scalar, wait_until
from tests.integration.test_retrieval import context, conversation, loaded  # noqa: F401 - the fixture
from tests.support import labelled_set as L

NOX = {"X-API-Key": "key-a", "X-User-Id": "nox"}
KEYS = {**API_KEYS, "nox-key": {"tenant": L.A, "user": "nox"}, "producer": {"tenant": L.A, "act_as": "nobody"}}


def with_keys(settings):
    return settings.model_copy(update={"api": ApiSettings(api_keys=KEYS)})


async def get(url: str, path: str, headers=NOX, **params) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
        return await http.get(path, params=params)


async def test_search_finds_wifi_by_meaning_scored_like_the_context_and_writes_nothing(loaded):  # noqa: F811
    await conversation(loaded, "c1", "nox", None)
    settings = with_keys(loaded)
    accessed = "SELECT COALESCE(sum(access_count), 0) + count(last_accessed_at) FROM fact_access"
    async with running_api(settings) as url:
        found = await get(url, "/v1/search", q="WiFi problem")
        assert found.status_code == 200, found.text
        body = found.json()
        assert await scalar(loaded, "SELECT count(*) FROM surfaced_items") == 0
        assert await scalar(loaded, accessed) == 0  # no access-count bump, no last_accessed_at
        ctx = (await context(url, "c1", query="WiFi problem"))["retrieved"]
    items = {item["id"]: item for item in body["items"]}
    assert "n02" in items  # "Network configuration issue ...": no shared word, found by meaning (seed 001)
    assert items["n02"]["score"]["found_by"] == ["vector"]
    in_context = next(item for item in ctx["items"] if item["id"] == "n02")
    for part in ("similarity", "importance_weight", "cosine", "keyword_score"):
        assert items["n02"]["score"][part] == pytest.approx(in_context["score"][part], abs=1e-6)
    assert items["n02"]["score"]["recency_weight"] == pytest.approx(in_context["score"]["recency_weight"], abs=1e-3)
    assert items["n02"]["line"] == in_context["line"]
    for item in body["items"]:
        s = item["score"]
        assert s["final"] == pytest.approx(s["similarity"] * s["importance_weight"] * s["recency_weight"])
        assert s["final"] > body["threshold"]
    finals = [item["score"]["final"] for item in body["items"]]
    assert finals == sorted(finals, reverse=True) and body["matched"] >= len(finals)
    seen = set(items) | {e["id"] for e in body["excluded"]}
    assert not {"b01", "n13"} & seen  # another tenant's, a superseded one
    assert body["user_id"] == "nox" and body["subject_id"] is None and None in body["subjects_searched"]


async def test_search_filters_scopes_and_refuses_what_the_key_may_not_do(loaded):  # noqa: F811
    settings = with_keys(loaded)
    async with running_api(settings) as url:
        facts_only = (await get(url, "/v1/search", q="network", kinds="fact", k=3)).json()
        assert facts_only["items"] and {i["kind"] for i in facts_only["items"]} == {"fact"}
        assert len(facts_only["items"]) <= 3 and facts_only["kinds"] == ["fact"]
        future = (await get(url, "/v1/search", q="network", since=(datetime.now(UTC) + timedelta(days=1)).isoformat()))
        assert future.status_code == 200 and future.json()["items"] == []
        old = (await get(url, "/v1/search", q="network configuration", kinds="fact",
                         until=(datetime.now(UTC) - timedelta(days=40)).isoformat())).json()
        assert {i["id"] for i in old["items"]} and all(
            datetime.fromisoformat(i["occurred_end"]) <= datetime.now(UTC) - timedelta(days=40) for i in old["items"])
        # Maria's Grandpa Joe memories: her own plus the ones Tom shared, never Tom's private ones.
        joe = (await get(url, "/v1/search", headers={"X-API-Key": "key-a", "X-User-Id": "maria"},
                         q="grandpa", subject_id=L.JOE, k=50)).json()
        owners = {(i["owner_user_id"], i["visibility"]) for i in joe["items"] if i["kind"] == "fact"}
        assert ("maria", "private") in owners and ("tom", "private") not in owners
        assert (await get(url, "/v1/search", headers={}, q="x")).status_code == 401
        assert (await get(url, "/v1/search", headers={"X-API-Key": "key-a"}, q="x")).status_code == 400  # no user
        bound = {"X-API-Key": "nox-key"}
        assert (await get(url, "/v1/search", headers=bound, q="WiFi")).json()["user_id"] == "nox"
        assert (await get(url, "/v1/search", headers=bound, q="WiFi", user_id="maria")).status_code == 403
        assert (await get(url, "/v1/search", headers={"X-API-Key": "producer"}, q="x", user_id="nox")).status_code == 403
        for path in ("/v1/search", "/v1/conversations"):  # NUL cannot reach PostgreSQL: refused, not a 500
            nul = await get(url, path, q="wifi\x00x")
            assert nul.status_code == 422 and "NUL" in nul.json()["detail"]["message"], path
        blank = await get(url, "/v1/search", q="   ")
        assert blank.status_code == 422 and "blank" in blank.json()["detail"]["message"]
        bad = await get(url, "/v1/search", q="x", kinds="fact,memes")
        assert bad.status_code == 422 and "memes" in bad.json()["detail"]["message"]
        other = (await get(url, "/v1/search", headers={"X-API-Key": "key-b", "X-User-Id": "nox"}, q="WiFi")).json()
        assert not {i["id"] for i in other["items"]} & {m.id for m in L.MEMORIES if m.tenant == L.A}


async def test_a_stored_memory_is_an_event_deduplicated_searchable_exported_and_kept_by_a_replay(settings):
    settings = with_keys(settings)
    content = "Network configuration issue in the office: the mesh access point drops laptops when band steering is on."
    async with running_projectors(settings), running_api(settings) as url:
        async with httpx.AsyncClient(base_url=url, headers=NOX, timeout=60) as http:
            first = await http.post("/v1/memories", params={"wait": "true", "wait_ms": 30000}, json={
                "content": content, "category": "infrastructure", "memory_type": "insight", "importance": 4,
                "tags": ["network", "office"]})
            assert first.status_code == 202, first.text
            stored = first.json()
            assert stored["projected"] and stored["outcome"] == "stored" and stored["stored_as"] == stored["fact_id"]
            again = (await http.post("/v1/memories", params={"wait": "true", "wait_ms": 30000}, json={
                "content": content + " ", "category": "infrastructure", "tags": ["wifi"]})).json()
            assert again["outcome"] == "merged" and again["stored_as"] == stored["fact_id"]  # dedup, seed 001
            fact = (await http.get(f"/v1/facts/{stored['fact_id']}")).json()
            assert fact["importance"] >= 4 and set(fact["tags"]) >= {"network", "office", "wifi"}
            assert fact["extracted_by"] == "manual" and set(fact["source_event_ids"]) == {stored["event_id"],
                                                                                         again["event_id"]}
            found = (await http.get("/v1/search", params={"q": "WiFi problem"})).json()
            assert found["items"][0]["id"] == stored["fact_id"]
            shared = (await http.post("/v1/memories", params={"wait": "true"}, json={
                "content": "Tom's birthday is on the 3rd of May.", "visibility": "shared",
                "subject_id": "tom"})).json()
            assert shared["outcome"] == "stored"
            assert (await http.get(f"/v1/facts/{shared['fact_id']}",
                                   headers={"X-User-Id": "maria"})).json()["visibility"] == "shared"
            export = await http.get("/v1/export")
            assert export.status_code == 200 and export.headers["content-type"].startswith("application/x-ndjson")
            lines = [orjson.loads(line) for line in export.content.splitlines()]
            bad = await http.post("/v1/memories", json={"content": "", "importance": 9})
            assert bad.status_code == 422 and "importance" in bad.json()["detail"]["message"]
            for body in (b'{"content": "a\\u0000b"}', b'{"content": "ok", "tags": ["t\\u0000"]}',
                         b'{"content": "a\\ud800b"}'):  # escaped in the JSON, as a client would send them
                refused = await http.post("/v1/memories", content=body, headers={"content-type": "application/json"})
                assert refused.status_code == 422 and refused.json()["detail"]["reason"], body
    by_id = {line["id"]: line for line in lines}
    assert set(by_id) == {stored["fact_id"], shared["fact_id"]} and all(line["user_id"] == "nox" for line in lines)
    assert by_id[stored["fact_id"]]["event_id"] == stored["event_id"]
    assert by_id[stored["fact_id"]]["kind"] == "fact" and by_id[shared["fact_id"]]["subject_id"] == "tom"
    assert by_id[stored["fact_id"]]["valid_from"] and by_id[stored["fact_id"]]["valid_to"] is None

    # A replay: a fresh generation projected from the same log has the same facts.
    replay = settings.model_copy(update={"generation": settings.generation + "_r"})
    await asyncio.to_thread(migrate, replay)
    await ensure_topics(replay)
    async with running_projectors(replay):
        await wait_until(lambda: _fact_count(replay), 120, "the replayed facts")
    assert await scalar(replay, "SELECT importance FROM facts WHERE fact_id = %s", (stored["fact_id"],)) == \
        fact["importance"]
    assert await scalar(replay, "SELECT visibility FROM facts WHERE fact_id = %s", (shared["fact_id"],)) == "shared"


async def _fact_count(settings) -> bool:
    return await scalar(settings, "SELECT count(*) FROM facts") == 2


async def _summaries(settings) -> None:
    """Conversation c1 of nox with 8 messages and a summary chain: completed 0-3, failed then
    completed 0-5 built on it (rows as the memory projector writes them)."""
    await conversation(settings, "c1", "nox", None, [f"message {i}" for i in range(8)])
    await conversation(settings, "c2", "maria", L.JOE, ["hello"])
    now = datetime.now(UTC)
    async with await _connect(settings) as conn:
        for memory_id, start, end, base, status, error, text in (
                (1, 0, 3, None, "completed", None, "summary of 0-3"),
                (2, 0, 5, 1, "failed", "LLM timeout", None),
                (3, 0, 5, 1, "completed", None, "summary of 0-5")):
            await conn.execute(
                "INSERT INTO memory (tenant_id, conversation_id, memory_id, memory_text, start_sequence, end_sequence,"
                " base_memory_id, status, error, prompt_version, model, generation_time_ms, source_event_ids,"
                " request_event_id, created_at, completed_at) VALUES (%s,'c1',%s,%s,%s,%s,%s,%s,%s,'summary-v1',"
                " 'extractive',%s,%s,%s,%s,%s)",
                (L.A, memory_id, text, start, end, base, status, error, 120 if text else None,
                 [f"c1-{s}" for s in range(start, end + 1)], f"req-{memory_id}", now, now if text else None))


def _connect(settings):
    import psycopg

    return psycopg.AsyncConnection.connect(settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public")


async def test_conversations_summaries_and_stats(settings):
    settings = with_keys(settings)
    await _summaries(settings)
    async with running_api(settings) as url:
        listed = (await get(url, "/v1/conversations")).json()
        one = (await get(url, "/v1/conversations", q="c1")).json()
        own = (await get(url, "/v1/conversations", headers={"X-API-Key": "nox-key"})).json()
        chain = await get(url, "/v1/conversations/c1/summaries")
        missing = await get(url, "/v1/conversations/nope/summaries")
        not_mine = await get(url, "/v1/conversations/c2/summaries", headers={"X-API-Key": "nox-key"})
        stats = await get(url, "/v1/stats", headers={"X-API-Key": "key-a"})
        user_stats = await get(url, "/v1/stats", headers={"X-API-Key": "nox-key"})
        other = (await get(url, "/v1/stats", headers={"X-API-Key": "key-b"})).json()
        exported = [orjson.loads(line) for line in (await get(url, "/v1/export")).content.splitlines()]
    summaries = [line for line in exported if line["kind"] == "summary"]
    assert [(s["id"], s["message_range"], s["conversation_id"]) for s in summaries] == \
        [("c1:1", [0, 4], "c1"), ("c1:3", [0, 6], "c1")]  # completed ones, [start, end) like chunks
    assert summaries[1]["source_event_ids"] == [f"c1-{i}" for i in range(6)] and summaries[1]["base_memory_id"] == 1
    assert listed["total"] == 2 and {c["conversation_id"] for c in listed["conversations"]} == {"c1", "c2"}
    c1 = next(c for c in listed["conversations"] if c["conversation_id"] == "c1")
    assert (c1["message_count"], c1["last_seq"], c1["summaries"], c1["summary_end_seq"], c1["summary_lag"]) == \
        (8, 7, 3, 5, 2)
    assert c1["last_message_at"] is not None
    assert one["total"] == 1 and own["total"] == 1 and own["conversations"][0]["user_id"] == "nox"
    assert chain.status_code == 200
    rows = chain.json()["summaries"]
    assert [(r["memory_id"], r["status"], r["start_seq"], r["end_seq"], r["base_memory_id"]) for r in rows] == \
        [(1, "completed", 0, 3, None), (2, "failed", 0, 5, 1), (3, "completed", 0, 5, 1)]
    assert rows[1]["error"] == "LLM timeout" and rows[2]["generation_time_ms"] == 120
    assert chain.json()["counts"] == {"processing": 0, "completed": 2, "failed": 1}
    assert missing.status_code == 404 and not_mine.status_code == 404
    assert stats.status_code == 200, stats.text
    body = stats.json()
    assert (body["conversations"], body["messages"], body["summaries"]) == \
        (2, 9, {"processing": 0, "completed": 2, "failed": 1})
    assert body["projection"]["error"] is None and body["projection"]["log_events"] == 0
    assert body["dead_letters"]["error"] is None and body["generation"] == settings.generation
    assert user_stats.status_code == 403
    assert other["conversations"] == 0 and other["messages"] == 0


async def test_dead_letters_show_reason_and_original_bytes(settings):
    settings = with_keys(settings)
    poison = b'{"type": "message.appended", "this is": "not an event"'
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers)
    await producer.start()
    try:
        await producer.send_and_wait(settings.kafka.conversation_topic, poison, key=f"{L.A}/c-bad".encode())
    finally:
        await producer.stop()
    async with running_projectors(settings), running_api(settings) as url:
        admin = {"X-Admin-Key": "dev-admin-key"}

        async def lettered() -> bool:
            response = await get(url, "/v1/admin/dead-letters", headers=admin)
            return response.status_code == 200 and response.json()["total"] >= 1

        await wait_until(lettered, 120, "the dead letter")
        body = (await get(url, "/v1/admin/dead-letters", headers=admin, limit=10)).json()
        stats = (await get(url, "/v1/stats", headers={"X-API-Key": "key-a"})).json()
        other = (await get(url, "/v1/stats", headers={"X-API-Key": "key-b"})).json()
        assert (await get(url, "/v1/admin/dead-letters", headers={"X-Admin-Key": "wrong"})).status_code == 401
    letter = body["letters"][0]
    assert base64.b64decode(letter["original_base64"]) == poison
    assert letter["original_sha256"] == hashlib.sha256(poison).hexdigest()
    assert letter["key"] == f"{L.A}/c-bad" and letter["reason"] and letter["stage"]
    assert body["by_reason"][letter["reason"]] == sum(1 for x in body["letters"] if x["reason"] == letter["reason"])
    assert stats["dead_letters"]["tenant_recent"] >= 1 and stats["dead_letters"]["by_reason"][letter["reason"]] >= 1
    assert other["dead_letters"]["tenant_recent"] == 0
    assert stats["projection"]["log_events"] == 1 and stats["projection"]["projected"] == 1


async def test_api_docs_work_offline_and_metrics_answer_without_a_redirect(settings):
    async with running_api(settings) as url:
        async with httpx.AsyncClient(base_url=url, follow_redirects=False, timeout=60) as http:
            for page in ("/docs", "/redoc"):
                html = (await http.get(page)).text
                assert not re.findall(r"(?:src|href)=[\"']?(?:https?:)?//", html), page  # nothing external
                assets = re.findall(r"(?:src|href)=[\"']?(/static/docs/[\w.-]+)", html)
                assert assets and "openapi.json" in html
                assert page == "/redoc" or '"validatorUrl": null' in html  # no badge from validator.swagger.io
                for asset in assets:
                    answer = await http.get(asset)
                    assert answer.status_code == 200 and len(answer.content) > 1000, asset
            assert (await http.get("/docs/oauth2-redirect")).status_code == 200
            metrics = await http.get("/metrics", headers={"Authorization": f"Bearer {settings.api.admin_keys[0]}"})
            assert metrics.status_code == 200 and "memory_ingested_messages_total" in metrics.text
            schema = (await http.get("/openapi.json")).json()
    for path in ("/v1/search", "/v1/memories", "/v1/export", "/v1/stats", "/v1/conversations",
                 "/v1/conversations/{conversation_id}/summaries", "/v1/admin/dead-letters"):
        for operation in schema["paths"][path].values():
            assert {"401", "503"} <= set(operation["responses"]), path

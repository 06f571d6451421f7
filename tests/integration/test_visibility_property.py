"""Property: no request of one user ever returns another user's private item (real API + PostgreSQL).

Two tenants with the same user and conversation names; every user has a conversation (messages,
a topic with its messages), a chunk, private facts (with and without a subject) and a shared
fact. Every private item carries its owner's marker `zz<tenant><user>`, every shared fact
`yy<tenant><user>`. Hypothesis draws a key (user-bound, service as the owner, service for any
user, producer), an endpoint and its parameters; the answer may only hold the markers the key
may see (docs/security.md), and never a 5xx.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from core.settings import ApiSettings
from tests.integration.conftest import running_api

TENANTS = {"ta": "tenant-a", "tb": "tenant-b"}
USERS = ("u1", "u2", "u3")
SUBJECT = "grandpa"
PRIVATE = re.compile(r"zz(t[ab])(u\d)")
SHARED = re.compile(r"yy(t[ab])(u\d)")


def keys() -> dict[str, dict]:
    out = {}
    for tk, tenant in TENANTS.items():
        out |= {f"user-{tk}-{u}": {"tenant": tenant, "user": u} for u in USERS}
        out |= {f"owner-{tk}": {"tenant": tenant}, f"any-{tk}": {"tenant": tenant, "act_as": "any_user"},
                f"producer-{tk}": {"tenant": tenant, "act_as": "nobody"}}
    return out


async def build_world(settings) -> None:
    now, dims = datetime.now(UTC), settings.embedding.dimensions
    vector = "[" + ",".join(["0.1"] * dims) + "]"
    model = settings.embedding.model
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        for tk, tenant in TENANTS.items():
            for u in USERS:
                mark, cid = f"zz{tk}{u}", f"c-{u}"
                await conn.execute(
                    "INSERT INTO conversations (tenant_id, conversation_id, user_id, subject_id, last_seq, message_count)"
                    " VALUES (%s, %s, %s, %s, 3, 4)", (tenant, cid, u, SUBJECT))
                for seq in range(4):
                    await conn.execute(
                        "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, subject_id, role,"
                        " content, occurred_at, source_partition, source_offset)"
                        " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,0,%s)",
                        (tenant, cid, seq, f"{tenant}-{cid}-{seq}", u, SUBJECT, "user" if seq % 2 == 0 else "assistant",
                         f"{mark} says grandpa story {seq}", now, seq))
                for fact_id, content, visibility, subject in (
                    (f"{mark}-private", f"{mark} private grandpa detail", "private", SUBJECT),
                    (f"{mark}-personal", f"{mark} personal grandpa note", "private", None),
                    (f"yy{tk}{u}-shared", f"yy{tk}{u} shared grandpa memory", "shared", SUBJECT),
                ):
                    await conn.execute(
                        "INSERT INTO facts (fact_id, tenant_id, owner_user_id, subject_id, category, content, visibility,"
                        " embedding, embedding_model, extracted_by, prompt_version, event_id, source_conversation_id)"
                        " VALUES (%s,%s,%s,%s,'family',%s,%s,%s::vector,%s,'test','test',%s,%s)",
                        (f"{tenant}-{fact_id}", tenant, u, subject, content, visibility, vector, model,
                         f"e-{tenant}-{fact_id}", cid))
                await conn.execute(
                    "INSERT INTO conversation_chunks (chunk_id, tenant_id, conversation_id, user_id, subject_id, content,"
                    " embedding, embedding_model, message_range_start, message_range_end, prompt_version, model,"
                    " event_id) VALUES (%s,%s,%s,%s,%s,%s,%s::vector,%s,0,4,'test','test',%s)",
                    (f"{tenant}-{mark}-chunk", tenant, cid, u, SUBJECT, f"{mark} chunk about grandpa", vector, model,
                     f"e-{tenant}-{mark}-chunk"))
                topic = f"{mark}-topic"
                await conn.execute(
                    "INSERT INTO topics (tenant_id, conversation_id, topic_id, title, first_seq, summary, created_at,"
                    " last_active_at, active, message_count) VALUES (%s,%s,%s,%s,0,%s,%s,%s,true,2)",
                    (tenant, cid, topic, f"{mark} grandpa topic", f"{mark} topic summary", now, now))
                for seq in range(2):
                    await conn.execute(
                        "INSERT INTO topic_messages (tenant_id, conversation_id, seq, topic_id, role, content,"
                        " occurred_at, event_id) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                        (tenant, cid, seq, topic, "user" if seq % 2 == 0 else "assistant", f"{mark} topic message",
                         now, f"t-{tenant}-{cid}-{seq}"))
                await conn.execute(
                    "INSERT INTO topic_conversations (tenant_id, conversation_id, active_topic_id, activated_seq,"
                    " last_seq) VALUES (%s,%s,%s,0,3)", (tenant, cid, topic))
        await conn.commit()


Request = tuple[str, str, str, str | None, str | None]  # key, endpoint, conversation or fact, user param, query

requests = st.tuples(
    st.sampled_from(sorted(keys())),
    st.sampled_from(["context", "history", "topics", "topic_history", "facts", "fact"]),
    st.sampled_from([f"c-{u}" for u in USERS] + ["c-none"]),
    st.one_of(st.none(), st.sampled_from(USERS)),
    st.one_of(st.none(), st.sampled_from(["grandpa", "private grandpa detail", "personal note",
                                                 "shared grandpa memory", "chunk about grandpa"])),
)


def allowed(key: str, endpoint: str, target: str, user: str | None) -> tuple[str, set[str]]:
    """(the key's tenant marker, the users whose private items this request may return)."""
    kind, tk = key.split("-")[0], key.split("-")[1]
    owner = target.removeprefix("c-")
    if kind == "user":
        return tk, {key.split("-")[2]}
    if kind == "producer":
        return tk, set()
    if endpoint in ("facts", "fact"):
        return tk, ({user} if kind == "any" and user else set())
    if kind == "owner":
        return tk, {owner}
    return tk, {owner} | ({user} if user else set())  # any_user: the conversation's owner and the named user


def call(http: httpx.Client, request: Request) -> httpx.Response:
    key, endpoint, target, user, query = request
    headers = {"X-API-Key": key}
    tk = key.split("-")[1]
    tenant = TENANTS[tk]
    if endpoint == "context":
        params = {k: v for k, v in (("user_id", user), ("query", query)) if v is not None}
        return http.get(f"/v1/conversations/{target}/context", params=params, headers=headers)
    if endpoint == "history":
        return http.get(f"/v1/conversations/{target}/messages", headers=headers)
    if endpoint == "topics":
        return http.get(f"/v1/conversations/{target}/topics", headers=headers)
    if endpoint == "topic_history":
        mark = f"zz{tk}{target.removeprefix('c-')}"
        return http.get(f"/v1/conversations/{target}/topics/{mark}-topic/history", headers=headers)
    if user is not None:
        headers["X-User-Id"] = user
    if endpoint == "facts":
        return http.get("/v1/facts", params={"subject_id": SUBJECT} if query else {}, headers=headers)
    owner = target.removeprefix("c-") if target != "c-none" else "u1"
    return http.get(f"/v1/facts/{tenant}-zz{tk}{owner}-private", headers=headers)


@pytest.mark.asyncio
async def test_no_request_of_one_user_returns_another_users_private_item(settings):
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=keys())})
    await build_world(settings)
    async with running_api(settings) as base:
        seen: dict[int, int] = {}

        @hsettings(max_examples=150, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
        @given(requests)
        def no_leak(request: Request) -> None:
            key, endpoint, target, user, _ = request
            with httpx.Client(base_url=base, timeout=60) as http:
                response = call(http, request)
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            assert response.status_code < 500, (request, response.text)
            if response.status_code >= 400:  # a refusal names only what was asked (the id), no content
                assert not any(word in response.text for word in ("says grandpa", "topic message")), response.text
                return
            tk, users = allowed(key, endpoint, target, user)
            for tenant_mark, owner in PRIVATE.findall(response.text):
                assert tenant_mark == tk and owner in users, (request, f"zz{tenant_mark}{owner}", response.text)
            for tenant_mark, _owner in SHARED.findall(response.text):
                assert tenant_mark == tk, (request, response.text)

        await asyncio.to_thread(no_leak)
    # The run exercised both answers and refusals (not only 4xx).
    assert seen.get(200, 0) > 20 and sum(n for code, n in seen.items() if code in (403, 404)) > 10, seen

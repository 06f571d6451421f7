"""Property: over EVERY route of the app (enumerated from its router, /metrics and the dashboard's
included), what each key scope may read and write (docs/security.md, the scopes table). Real API
over real HTTP on the shared PostgreSQL and Kafka, the world of test_visibility_property.

Hypothesis draws a route, a key (producer, user-bound, service as the owner, service for any
user, with and without X-User-Id) and whose conversation or fact the ids name; the answer must
never be a 5xx, and:
- no API key reads /metrics or an operator route (/v1/admin, /v1/ui/admin): 401;
- a producer key (act_as nobody) gets a 2xx only where it writes (ingest) or asks who it is;
- a key bound to a user naming another user (X-User-Id) gets no 2xx;
- a service key that acts only as the owner, naming another user on a route that takes
  X-User-Id, gets no 2xx;
- a 2xx holds only the private items of users the key may act for, of its own tenant.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from api.access_log import http_routes
from api.app import create_app
from core.settings import ApiSettings
from tests.integration.conftest import running_api
from tests.integration.test_visibility_property import PRIVATE, SHARED, TENANTS, USERS, build_world, keys

ADMIN, SCRAPER = "prop-admin", "prop-scraper"
PUBLIC = ("/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/ui", "/ui/",
          "/ui/static/{name}")
OPERATOR = ("/metrics", "/v1/admin/", "/v1/ui/admin/")
WRITES_FOR_A_PRODUCER = {("POST", "/v1/conversations/{conversation_id}/messages"), ("GET", "/v1/ui/session")}
BODIES = {
    ("POST", "/v1/conversations/{conversation_id}/messages"):
        lambda t: {"user_id": t, "seq": 90, "role": "user", "content": "a later message"},
    ("POST", "/v1/memories"): lambda t: {"content": "likes tea", "user_id": t},
    ("PATCH", "/v1/facts/{fact_id}"): lambda t: {"content": "an edited fact"},
    ("PATCH", "/v1/facts/{fact_id}/visibility"): lambda t: {"visibility": "private"},
}
REQUIRED_QUERIES = {"q": "grandpa", "a": "nope", "b": "nope", "against": "nope"}


def endpoints(settings) -> list[tuple[str, str, object]]:
    """(method, path template, route) of every route the app answers (mounts aside)."""
    routes = http_routes(create_app(settings).routes)
    found = {(m, r.path): r for r in routes if r.methods for m in r.methods - {"HEAD"}}
    return [(m, path, found[(m, path)]) for m, path in sorted(found, key=lambda e: (e[1], e[0]))]


def concrete(template: str, tk: str, target: str, kind: str) -> str:
    tenant, mark = TENANTS[tk], f"zz{tk}{target}"
    values = {"conversation_id": f"c-{target}", "fact_id": f"{tenant}-{mark}-private", "topic_id": f"{mark}-topic",
              "user_id": target, "name": "app.js", "kind": kind, "b": "nope",
              "item_id": {"fact": f"{tenant}-{mark}-private", "chunk": f"{tenant}-{mark}-chunk",
                          "message": f"c-{target}:1"}[kind]}
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], template)


def may_see(key: str, target: str, named: str | None) -> set[str]:
    """The users whose private items an answer to this key may hold."""
    kind, parts = key.split("-")[0], key.split("-")
    if kind == "user":
        return {parts[2]}
    if kind == "producer":
        return set()
    if kind == "owner":
        return {target}
    return {target} | ({named} if named else set())  # any_user: the owner addressed and the named user


@pytest.mark.asyncio
async def test_every_route_answers_each_key_scope_only_what_it_may(settings):
    all_keys = keys()
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=all_keys, admin_keys=[ADMIN],
                                                              metrics_keys=[SCRAPER])})
    await build_world(settings)
    routes = endpoints(settings)
    assert len(routes) >= 35 and any(path == "/metrics" for _, path, _ in routes)
    tried: set[tuple[str, str]] = set()
    seen: dict[int, int] = {}
    async with running_api(settings) as base:

        @hsettings(max_examples=400, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
        @given(st.sampled_from(routes), st.sampled_from(sorted(all_keys)), st.sampled_from(USERS),
               st.one_of(st.none(), st.sampled_from(USERS)), st.sampled_from(["fact", "chunk", "message"]))
        def scoped(endpoint, key: str, target: str, named: str | None, kind: str) -> None:
            method, template, route = endpoint
            tk = key.split("-")[1]
            headers = {"X-API-Key": key} | ({"X-User-Id": named} if named else {})
            dependant = getattr(route, "dependant", None)  # None: a plain Starlette route (/openapi.json)
            params = {p.alias: REQUIRED_QUERIES[p.alias] for p in (dependant.query_params if dependant else [])
                      if p.field_info.is_required()}
            body = BODIES.get((method, template))
            with httpx.Client(base_url=base, timeout=60) as http:
                answer = http.request(method, concrete(template, tk, target, kind), params=params, headers=headers,
                                      json=body(target) if body else None)
            tried.add((method, template))
            seen[answer.status_code] = seen.get(answer.status_code, 0) + 1
            case = (method, template, key, target, named, answer.status_code, answer.text[:300])
            assert answer.status_code < 500, case
            ok = 200 <= answer.status_code < 300
            if template in PUBLIC:
                return
            if any(template == p or template.startswith(p) for p in OPERATOR):
                assert answer.status_code == 401, case
                return
            scope = key.split("-")[0]
            if scope == "producer":
                assert not ok or (method, template) in WRITES_FOR_A_PRODUCER, case
            if scope == "user" and named and named != key.split("-")[2]:
                assert not ok, case
            takes_header = any(h.alias == "X-User-Id" for h in (dependant.header_params if dependant else []))
            if scope == "owner" and named and named != target and takes_header:
                assert not ok, case
            if ok:
                allowed = may_see(key, target, named)
                for tenant_mark, owner in PRIVATE.findall(answer.text):
                    assert tenant_mark == tk and owner in allowed, (case, f"zz{tenant_mark}{owner}")
                for tenant_mark, _ in SHARED.findall(answer.text):
                    assert tenant_mark == tk, case

        await asyncio.to_thread(scoped)
    # Most routes were tried, and both answers and refusals came back.
    assert len(tried) >= 0.8 * len(routes), sorted({(m, p) for m, p, _ in routes} - tried)
    assert sum(n for c, n in seen.items() if c < 300) > 40 and sum(n for c, n in seen.items() if c in (401, 403)) > 40

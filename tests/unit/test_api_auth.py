"""API keys and acting users (api/auth.py, ApiSettings): pure rules, no I/O."""

from __future__ import annotations

import hashlib
import logging

import pytest
from fastapi import HTTPException
from pydantic import ValidationError

import api.auth as auth
from api.auth import KeyRing, Principal, conversation_user, may_read_tenant, named_user, writer_may_append
from core.settings import ApiKeyGrant, ApiSettings, Settings


def hashed(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def test_every_configured_digest_is_compared_in_constant_time(monkeypatch):
    calls = []
    real = auth.hmac.compare_digest
    monkeypatch.setattr(auth.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    ring = KeyRing.for_api(ApiSettings(api_keys={"k1": "t1", "k2": "t2", "k3": "t3"}))
    assert ring.lookup("k1").tenant == "t1"
    # No early exit on the match: all three digests compared, each against the presented key's digest.
    assert len(calls) == 3 and all(b == hashlib.sha256(b"k1").digest() for _, b in calls)


def test_hashed_keys_match_their_plain_key_and_nothing_else():
    ring = KeyRing.for_api(ApiSettings(api_keys={hashed("s3cret"): {"tenant": "acme", "user": "alice"}}))
    principal = ring.lookup("s3cret")
    assert principal == Principal("acme", "alice", "conversation_owner", principal.key_name)
    assert principal.key_name.startswith("sha256:") and "s3cret" not in principal.key_name
    assert ring.lookup(hashed("s3cret")) is None  # the digest itself is not a key
    assert ring.lookup("S3cret") is None


@pytest.mark.parametrize("presented", [None, ""])
def test_a_missing_or_empty_key_is_nobody(presented):
    assert KeyRing.for_api(ApiSettings(api_keys={"k": "t"})).lookup(presented) is None


@pytest.mark.parametrize("keys", [{"": "t"}, {" ": "t"}, {hashed(""): "t"}, {"sha256:abc": "t"}])
def test_empty_and_malformed_keys_are_refused_in_every_environment(keys):
    for environment in ("development", "test", "production"):
        with pytest.raises(ValidationError):
            Settings(environment=environment, api=ApiSettings(api_keys=keys, admin_keys=[hashed("adm")]))


def test_empty_admin_keys_are_refused():
    with pytest.raises(ValidationError, match="must not be empty"):
        ApiSettings(admin_keys=[""])


def test_production_takes_hashed_keys_only_and_never_the_development_ones():
    ok = Settings(environment="production",
                  api=ApiSettings(api_keys={hashed("prod-key"): "acme"}, admin_keys=[hashed("prod-admin")]))
    assert ok.api.grants()[hashed("prod-key")].tenant == "acme"
    with pytest.raises(ValidationError, match="hashed at rest") as refused:
        Settings(environment="production", api=ApiSettings(api_keys={"prod-key": "acme"}, admin_keys=[hashed("a")]))
    assert "prod-key" not in str(refused.value)  # the error never prints a key
    with pytest.raises(ValidationError, match="development API key"):
        Settings(environment="production", api=ApiSettings(api_keys={hashed("dev-key"): "acme"},
                                                           admin_keys=[hashed("a")]))
    with pytest.raises(ValidationError, match="development admin key"):
        Settings(environment="production", api=ApiSettings(api_keys={hashed("k"): "acme"}))
    with pytest.raises(ValidationError, match="development API key"):
        Settings(environment="production")


def test_the_old_settings_format_still_works_as_conversation_owner_service_keys(monkeypatch):
    monkeypatch.setenv("MEMORY_API__API_KEYS", '{"k1": "acme", "k2": {"tenant": "acme", "user": "bob"}}')
    grants = Settings().api.grants()
    assert grants["k1"] == ApiKeyGrant(tenant="acme") and grants["k1"].scope == "conversation_owner"
    assert grants["k2"].user == "bob"
    with pytest.raises(ValidationError, match="acts only as that user"):
        ApiKeyGrant(tenant="acme", user="bob", act_as="any_user")


USER = Principal("t", "alice", "conversation_owner", "alice-key")
OWNER = Principal("t", None, "conversation_owner", "svc")
ANY = Principal("t", None, "any_user", "svc-any")
NOBODY = Principal("t", None, "nobody", "producer")


def test_a_user_key_sees_only_its_own_conversations_as_itself():
    assert conversation_user(USER, "alice", None, "context") == "alice"
    assert conversation_user(USER, "bob", None, "context") is None  # 404, like a missing one
    with pytest.raises(HTTPException) as refused:
        conversation_user(USER, "alice", "bob", "context")
    assert refused.value.status_code == 403


def test_service_keys_act_as_far_as_their_scope_and_each_act_is_logged(caplog):
    caplog.set_level(logging.INFO, logger="memory_agent.audit")
    assert conversation_user(OWNER, "bob", None, "context") == "bob"
    assert conversation_user(OWNER, "bob", "bob", "context") == "bob"
    with pytest.raises(HTTPException) as refused:  # the PIN leak of issue 11: ?user_id=alice on Bob's conversation
        conversation_user(OWNER, "bob", "alice", "context")
    assert refused.value.status_code == 403
    assert conversation_user(ANY, "bob", "alice", "context") == "alice"
    with pytest.raises(HTTPException):
        conversation_user(NOBODY, "bob", None, "history")
    logged = [r.getMessage() for r in caplog.records]
    assert any("key=svc-any" in m and "user=alice" in m and "owner=bob" in m for m in logged)
    assert len(logged) == 3  # one line per act, none for the refused ones


def test_named_users_for_the_facts_endpoints():
    assert named_user(USER, None, "list facts") == "alice"
    assert named_user(ANY, "carol", "list facts") == "carol"
    for principal, named, code in ((USER, "bob", 403), (OWNER, "bob", 403), (NOBODY, "bob", 403), (ANY, None, 400)):
        with pytest.raises(HTTPException) as refused:
            named_user(principal, named, "list facts")
        assert refused.value.status_code == code


def test_a_user_key_appends_only_as_itself_to_its_own_conversations():
    writer_may_append(USER, "alice", None)
    writer_may_append(USER, "alice", "alice")
    for user_id, owner in (("bob", None), ("alice", "bob")):
        with pytest.raises(HTTPException) as refused:
            writer_may_append(USER, user_id, owner)
        assert refused.value.status_code == 403


def test_a_conversations_owner_is_fixed_by_its_first_message():
    for key in (OWNER, ANY, NOBODY):
        writer_may_append(key, "someone", None)
        writer_may_append(key, "someone", "someone")
        with pytest.raises(HTTPException) as refused:
            writer_may_append(key, "anyone", "someone")
        assert refused.value.status_code == 409 and refused.value.detail["reason"] == "owner_conflict"
    writer_may_append(ANY, "anyone", "someone", other_user=True)  # granted any_user and says so
    for key in (OWNER, NOBODY):
        with pytest.raises(HTTPException) as refused:
            writer_may_append(key, "anyone", "someone", other_user=True)
        assert refused.value.status_code == 403


def test_a_producer_key_reads_no_tenant_totals():
    may_read_tenant(OWNER, "stats")
    may_read_tenant(ANY, "stats")
    for key in (NOBODY, USER):
        with pytest.raises(HTTPException) as refused:
            may_read_tenant(key, "stats")
        assert refused.value.status_code == 403

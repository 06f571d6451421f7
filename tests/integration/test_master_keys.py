"""Data keys wrapped by a master key, on real PostgreSQL (docs/security.md, "Data keys at rest"):
what `public.data_keys` holds opens nothing without the master key, a process with the master
key opens sealed events, a wrong or missing master key is a clear error (never an erasure), and
rotation re-wraps every key so the old master key can go."""

from __future__ import annotations

import base64
import json
import uuid

import psycopg
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from core import privacy
from core.master_keys import MasterKeyError, MasterKeys, new_master_key
from core.settings import PrivacySettings
from schemas.codec import decode, encode, new_event
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from schemas import sealed
from schemas.sealed import ERASED_CONTENT
from tests.integration.conftest import make_settings, wait_until

ONE, TWO = new_master_key(), new_master_key()


@pytest.fixture(autouse=True)
def no_hooks_of_other_tests():
    """decode here must leave sealed messages sealed (each test opens them with its own stores):
    no opener or sealer that an earlier test's settings installed in this process."""
    sealed.set_opener(None)
    sealed.set_field_opener(None)
    sealed.set_sealer(None)
    sealed.set_state_hooks(None, None)


def store(stack, deployment: str, keys: dict[str, str], current: str | None = None) -> privacy.PostgresKeyStore:
    """A fresh store (no cache: another process) of one deployment with these master keys."""
    return privacy.PostgresKeyStore(stack.postgres_dsn, deployment, MasterKeys.of(keys, current))


def stored(stack, deployment: str) -> dict[str, tuple[str | None, bytes]]:
    with psycopg.connect(stack.postgres_dsn) as conn:
        return {user: (master, bytes(key)) for user, master, key in conn.execute(
            "SELECT user_id, master_key_id, data_key FROM public.data_keys WHERE deployment = %s", (deployment,))}


def sealed_message(tenant: str, user: str, text: str, keys) -> bytes:
    event = new_event(MESSAGE_APPENDED, MessageAppended(role="user", content=text), tenant_id=tenant,
                      conversation_id="c", user_id=user, seq=0)
    return encode(privacy.seal(event, keys))


def opened(raw: bytes, keys) -> str:
    event = decode(raw)
    return privacy.opener(keys)(event.envelope, event.payload).content


def test_keys_are_wrapped_at_rest_and_open_only_with_the_master_key(stack):
    deployment, tenant = f"mk-{uuid.uuid4().hex[:8]}", "t"
    writer = store(stack, deployment, {"mk1": ONE})
    raw = sealed_message(tenant, "alice", "my secret is zqxwrapped", writer)
    key_id, data_key = writer.get_or_create(tenant, "alice")
    [(master, at_rest)] = stored(stack, deployment).values()
    # What a dump of PostgreSQL holds: no copy of the key, and nothing it opens.
    assert master == "mk1" and data_key not in at_rest and len(at_rest) == 60
    content = base64.b64decode(decode(raw).payload.content)
    for candidate in (at_rest[:32], at_rest[12:44], at_rest[-32:]):
        with pytest.raises(InvalidTag):
            AESGCM(candidate).decrypt(content[:12], content[12:], decode(raw).envelope.event_id.encode())
    # Another process with the master key opens it.
    assert opened(raw, store(stack, deployment, {"mk1": ONE})) == "my secret is zqxwrapped"
    assert store(stack, deployment, {"mk1": ONE}).check() == {"mk1": 1}


def test_a_wrong_or_missing_master_key_is_a_clear_error_never_an_erasure(stack):
    deployment, tenant = f"mk-{uuid.uuid4().hex[:8]}", "t"
    raw = sealed_message(tenant, "alice", "hello zqxwrong", store(stack, deployment, {"mk1": ONE}))
    wrong = store(stack, deployment, {"mk1": TWO})
    with pytest.raises(MasterKeyError, match="master key 'mk1' does not unwrap the data key of user 'alice'"):
        opened(raw, wrong)  # not "[erased]": nothing is skipped or dropped
    with pytest.raises(MasterKeyError, match="wrong master key"):
        wrong.check()
    missing = store(stack, deployment, {"mk2": TWO})
    with pytest.raises(MasterKeyError, match="wrapped by master key 'mk1', which is not configured"):
        missing.get_or_create(tenant, "alice")
    with pytest.raises(MasterKeyError, match="configured: none"):
        opened(raw, store(stack, deployment, {}))
    # Start-up refuses too: install checks the stored keys before any event is read.
    settings = make_settings(stack, privacy=PrivacySettings(encrypt_content=True, master_keys={"mk1": TWO}))
    settings = settings.model_copy(update={"kafka": settings.kafka.model_copy(update={"topic_prefix": deployment})})
    with pytest.raises(MasterKeyError, match="wrong master key"):
        privacy.install(settings)
    # A destroyed key is still an erasure, whatever the master key.
    good = store(stack, deployment, {"mk1": ONE})
    assert good.destroy(tenant, "alice")
    assert opened(raw, store(stack, deployment, {"mk1": ONE})) == ERASED_CONTENT


def test_rotation_rewraps_every_key_so_the_old_master_key_can_go(stack):
    deployment, tenant = f"mk-{uuid.uuid4().hex[:8]}", "t"
    legacy = store(stack, deployment, {})  # a key written before any master key was configured
    raws = {"carol": sealed_message(tenant, "carol", "carol zqxlegacy", legacy)}
    assert stored(stack, deployment)["carol"][0] is None
    old = store(stack, deployment, {"mk1": ONE})
    for user in ("alice", "bob"):
        raws[user] = sealed_message(tenant, user, f"{user} zqxrotate", old)
    assert old.check() == {"mk1": 2, "": 1}
    assert opened(raws["carol"], old) == "carol zqxlegacy"  # read as it is until re-wrapped
    both = store(stack, deployment, {"mk1": ONE, "mk2": TWO}, "mk2")
    assert both.rewrap(batch=2) == 3  # two batches
    assert {u: m for u, (m, _) in stored(stack, deployment).items()} == {"alice": "mk2", "bob": "mk2", "carol": "mk2"}
    assert both.rewrap() == 0
    new_only = store(stack, deployment, {"mk2": TWO})
    for user, raw in raws.items():
        assert opened(raw, new_only).startswith(user)
    with pytest.raises(MasterKeyError, match="'mk2', which is not configured"):
        opened(raws["alice"], store(stack, deployment, {"mk1": ONE}))
    with pytest.raises(MasterKeyError, match="no master key configured"):
        legacy.rewrap()


@pytest.mark.asyncio
async def test_a_destroyed_key_leaves_every_process_cache_at_once(stack):
    """The broadcast (PostgreSQL NOTIFY): a store that cached alice's key drops it as soon as
    another destroys it, not after its 60 s expiry; other users' keys stay cached."""
    deployment, tenant = f"mk-{uuid.uuid4().hex[:8]}", "t"
    other = store(stack, deployment, {"mk1": ONE})
    raw = sealed_message(tenant, "alice", "alice zqxbroadcast", other)
    kept = sealed_message(tenant, "bob", "bob zqxbroadcast", other)
    reader = store(stack, deployment, {"mk1": ONE})
    reader.listen()
    assert privacy._Listener.of(stack.postgres_dsn).listening.wait(30)
    assert opened(raw, reader) == "alice zqxbroadcast" and opened(kept, reader) == "bob zqxbroadcast"  # cached
    assert store(stack, f"{deployment}-other", {"mk1": ONE}).destroy(tenant, "alice") is False  # another deployment
    assert other.destroy(tenant, "alice")

    async def dropped() -> bool:
        return opened(raw, reader) == ERASED_CONTENT
    await wait_until(dropped, 30, "the destroyed key dropped from the other store's cache")
    assert privacy.CACHE_S >= 60  # so it was the broadcast, not the expiry
    assert any(k[:2] == ("t", "bob") for k in reader._cache)  # bob's key is still cached
    assert opened(kept, reader) == "bob zqxbroadcast"


def test_the_privacy_commands_check_and_rewrap(stack, monkeypatch):
    from click.testing import CliRunner

    from memory_agent.cli import main
    from core.settings import get_settings

    deployment, tenant = f"mk-{uuid.uuid4().hex[:8]}", "t"
    sealed_message(tenant, "alice", "alice zqxcli", store(stack, deployment, {"mk1": ONE}))
    monkeypatch.setenv("MEMORY_POSTGRES__DSN", stack.postgres_dsn)
    monkeypatch.setenv("MEMORY_KAFKA__TOPIC_PREFIX", deployment)

    def run(*args: str, keys: dict[str, str], current: str | None = None):
        monkeypatch.setenv("MEMORY_PRIVACY__MASTER_KEYS", json.dumps(keys))
        if current:
            monkeypatch.setenv("MEMORY_PRIVACY__MASTER_KEY_ID", current)
        get_settings.cache_clear()
        try:
            return CliRunner().invoke(main, ["privacy", *args])
        finally:
            get_settings.cache_clear()

    assert len(base64.b64decode(CliRunner().invoke(main, ["privacy", "new-master-key"]).output.strip())) == 32
    ok = run("check", keys={"mk1": ONE})
    assert ok.exit_code == 0 and "1 live data keys wrapped by 'mk1'" in ok.output, ok.output
    wrong = run("check", keys={"mk1": TWO})
    assert wrong.exit_code == 1 and "wrong master key" in wrong.output and ONE not in wrong.output, wrong.output
    rotated = run("rewrap", keys={"mk1": ONE, "mk2": TWO}, current="mk2")
    assert rotated.exit_code == 0 and "1 data keys re-wrapped with master key 'mk2'" in rotated.output, rotated.output
    assert run("check", keys={"mk2": TWO}, current="mk2").output.strip() == "1 live data keys wrapped by 'mk2'"

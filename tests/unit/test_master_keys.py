"""Master keys wrapping the data keys (core/master_keys.py, docs/security.md)."""

from __future__ import annotations

import base64
import hashlib
import json
import os

import pytest
from pydantic import ValidationError

from domain.secrets import is_secret
from core.master_keys import MasterKeyError, MasterKeys, new_master_key
from core.settings import ApiSettings, PrivacySettings, Settings

ONE, TWO = new_master_key(), new_master_key()
ID = b"data-key\ndeployment\ntenant\nalice\nkey-1"


def test_a_wrapped_key_unwraps_with_its_master_key_and_holds_no_copy_of_the_key():
    ring = MasterKeys.of({"mk1": ONE})
    data_key = os.urandom(32)
    master_id, stored = ring.wrap(data_key, ID)
    assert master_id == "mk1" and data_key not in stored and len(stored) == 12 + 32 + 16
    assert ring.unwrap(master_id, stored, ID, "alice") == data_key


def test_the_wrong_master_key_or_a_missing_one_is_a_clear_error_not_an_erasure():
    _, stored = MasterKeys.of({"mk1": ONE}).wrap(os.urandom(32), ID)
    with pytest.raises(MasterKeyError, match="master key 'mk1' does not unwrap the data key of alice.*wrong master key"):
        MasterKeys.of({"mk1": TWO}).unwrap("mk1", stored, ID, "alice")
    with pytest.raises(MasterKeyError, match="wrapped by master key 'mk1', which is not configured \\(configured: mk2\\)"):
        MasterKeys.of({"mk2": TWO}).unwrap("mk1", stored, ID, "alice")
    with pytest.raises(MasterKeyError, match="configured: none"):
        MasterKeys().unwrap("mk1", stored, ID, "alice")
    assert not issubclass(MasterKeyError, ValueError)  # the openers take ValueError for "does not open"


def test_a_wrapped_key_moved_to_another_row_does_not_unwrap():
    ring = MasterKeys.of({"mk1": ONE})
    _, stored = ring.wrap(os.urandom(32), ID)
    with pytest.raises(MasterKeyError):
        ring.unwrap("mk1", stored, ID.replace(b"alice", b"bob"), "bob")


def test_without_a_master_key_keys_are_stored_as_they_are_and_such_rows_still_read():
    data_key = os.urandom(32)
    assert MasterKeys().wrap(data_key, ID) == (None, data_key)
    assert MasterKeys.of({"mk1": ONE}).unwrap(None, data_key, ID, "alice") == data_key  # before wrapping was set


def test_rotation_wraps_with_the_current_key_and_reads_both():
    old = MasterKeys.of({"mk1": ONE})
    data_key = os.urandom(32)
    _, by_old = old.wrap(data_key, ID)
    both = MasterKeys.of({"mk1": ONE, "mk2": TWO}, "mk2")
    master_id, by_new = both.wrap(both.unwrap("mk1", by_old, ID, "alice"), ID)
    assert master_id == "mk2"
    assert MasterKeys.of({"mk2": TWO}).unwrap("mk2", by_new, ID, "alice") == data_key


@pytest.mark.parametrize("configured, current, message", [
    ({"mk1": "not base64!"}, None, "is not base64"),
    ({"mk1": base64.b64encode(b"short").decode()}, None, "must be 32 bytes"),
    ({"bad id": ONE}, None, "must match"),
    ({"mk1": ONE, "mk2": TWO}, None, "name the one that wraps new data keys"),
    ({"mk1": ONE}, "mk9", "'mk9' is not among the master keys"),
])
def test_bad_master_keys_are_refused_naming_the_problem_and_never_the_key(configured, current, message):
    with pytest.raises(ValueError, match=message) as caught:
        MasterKeys.of(configured, current)
    assert all(v not in str(caught.value) for v in configured.values())


def test_settings_take_keys_from_the_environment_and_from_a_file(tmp_path, monkeypatch):
    path = tmp_path / "master.json"
    path.write_text(json.dumps({"mk1": ONE}))
    monkeypatch.setenv("MEMORY_PRIVACY__MASTER_KEY_FILE", str(path))
    monkeypatch.setenv("MEMORY_PRIVACY__MASTER_KEYS", json.dumps({"mk2": TWO}))
    monkeypatch.setenv("MEMORY_PRIVACY__MASTER_KEY_ID", "mk2")
    settings = Settings()
    ring = settings.privacy.master_key_ring
    assert sorted(ring.keys) == ["mk1", "mk2"] and ring.current == "mk2"
    assert ONE not in repr(settings) and TWO not in repr(settings) and ONE not in repr(ring)
    path.write_text("{not json")
    with pytest.raises(ValidationError, match="is not JSON"):
        Settings()
    path.write_text(json.dumps({"mk2": ONE}))
    with pytest.raises(ValidationError, match="'mk2' differs between"):
        Settings()


def test_production_refuses_sealing_without_a_master_key():
    api = ApiSettings(api_keys={"sha256:" + hashlib.sha256(b"k").hexdigest(): "acme"},
                      admin_keys=["sha256:" + hashlib.sha256(b"a").hexdigest()])
    with pytest.raises(ValidationError, match="refusing to seal content in production without a master key"):
        Settings(environment="production", api=api, privacy=PrivacySettings(encrypt_content=True))
    ok = Settings(environment="production", api=api,
                  privacy=PrivacySettings(encrypt_content=True, master_keys={"mk1": ONE}))
    assert ok.privacy.master_key_ring.current == "mk1"
    Settings(environment="production", api=api)  # sealing off: nothing to wrap
    Settings(environment="development", privacy=PrivacySettings(encrypt_content=True))  # development may


def test_master_keys_are_never_recorded_with_a_generation():
    assert is_secret("MEMORY_PRIVACY__MASTER_KEYS")
    assert not is_secret("MEMORY_PRIVACY__MASTER_KEY_ID")

"""Secret settings never recorded in the generations registry (domain/secrets.py)."""

from __future__ import annotations

from domain.secrets import is_secret, redact_config, split_overrides, with_secrets_from


def test_secret_settings_are_recognised_by_name():
    for name in ("MEMORY_LLM__API_KEY", "MEMORY_EMBEDDING__API_KEY", "MEMORY_API__API_KEYS",
                 "MEMORY_API__ADMIN_KEYS", "MEMORY_POSTGRES__DSN", "MEMORY_X__PASSWORD", "MEMORY_X__TOKEN"):
        assert is_secret(name), name
    for name in ("MEMORY_LLM__MODEL", "MEMORY_LLM__SUMMARY_PROMPT_VERSION", "MEMORY_SYSTEMS"):
        assert not is_secret(name), name


def test_overrides_split_into_recordable_values_and_secret_names():
    public, secret = split_overrides({"MEMORY_LLM__API_KEY": "sk-1", "MEMORY_LLM__MODEL": "m"})
    assert public == {"MEMORY_LLM__MODEL": "m"} and secret == ["MEMORY_LLM__API_KEY"]


def test_old_rows_with_a_secret_are_redacted_on_read():
    old = {"llm_model": "m", "overrides": {"MEMORY_LLM__API_KEY": "sk-1", "MEMORY_LLM__MODEL": "m"}}
    redacted = redact_config(old)
    assert "sk-1" not in repr(redacted)
    assert redacted["overrides"] == {"MEMORY_LLM__MODEL": "m"}
    assert redacted["secret_overrides"] == ["MEMORY_LLM__API_KEY"]
    assert redact_config({"overrides": {"MEMORY_LLM__MODEL": "m"}}) == {"overrides": {"MEMORY_LLM__MODEL": "m"}}


def test_resume_takes_secrets_from_the_environment_and_names_the_missing_ones():
    config = {"overrides": {"MEMORY_LLM__MODEL": "m"}, "secret_overrides": ["MEMORY_LLM__API_KEY"]}
    overrides, missing = with_secrets_from({"MEMORY_LLM__API_KEY": "sk-2"}, config)
    assert overrides == {"MEMORY_LLM__MODEL": "m", "MEMORY_LLM__API_KEY": "sk-2"} and missing == []
    assert with_secrets_from({}, config) == ({"MEMORY_LLM__MODEL": "m"}, ["MEMORY_LLM__API_KEY"])

"""Which settings are secrets, and generation configs with them left out.

A replay's `--set` overrides are recorded in public.memory_generations.config so that
`replay resume` can start the worker again with the same settings. Secrets (API keys,
passwords, tokens, DSNs) are never recorded: only their names, under `secret_overrides`;
`replay resume` takes their values from the environment again.
"""

from __future__ import annotations

import re
from typing import Any

# Any setting whose variable name holds one of these words is a secret (MEMORY_LLM__API_KEY,
# MEMORY_EMBEDDING__API_KEY, MEMORY_API__API_KEYS, MEMORY_API__ADMIN_KEYS, MEMORY_PRIVACY__MASTER_KEYS,
# MEMORY_POSTGRES__DSN...).
_SECRET = re.compile(r"(API_KEY|ADMIN_KEY|MASTER_KEYS|PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|DSN)", re.IGNORECASE)


def is_secret(env_name: str) -> bool:
    return bool(_SECRET.search(env_name))


def split_overrides(overrides: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """(the overrides that may be recorded, the names of the secret ones)."""
    public = {name: value for name, value in overrides.items() if not is_secret(name)}
    return public, sorted(name for name in overrides if is_secret(name))


def redact_config(config: dict[str, Any]) -> dict[str, Any]:
    """A generation config without secret values (rows recorded before secrets were left out
    are redacted on read, so no listing shows them)."""
    overrides = config.get("overrides")
    if not isinstance(overrides, dict):
        return config
    public, secret = split_overrides(overrides)
    if not secret:
        return config
    named = sorted(set(config.get("secret_overrides", [])) | set(secret))
    return {**config, "overrides": public, "secret_overrides": named}


def with_secrets_from(environ: dict[str, str], config: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The overrides to start a generation's worker again: the recorded ones plus each secret
    from `environ`; the second value names the secrets `environ` does not have."""
    overrides = dict(config.get("overrides", {}))
    missing = []
    for name in config.get("secret_overrides", []):
        if name in environ:
            overrides[name] = environ[name]
        else:
            missing.append(name)
    return overrides, missing

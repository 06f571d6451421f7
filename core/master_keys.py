"""Master keys that wrap the per-user data keys (docs/security.md, "Data keys at rest").

The data keys of crypto-shredding (core/privacy.py) are stored in PostgreSQL
(`public.data_keys`) wrapped by a master key held outside the database: a setting
(`MEMORY_PRIVACY__MASTER_KEYS`) or a file (`MEMORY_PRIVACY__MASTER_KEY_FILE`), each key named
by an id so it can be rotated. A dump of PostgreSQL alone then opens nothing.

Wrapping is AES-256-GCM: nonce (12 bytes) + ciphertext of the 32-byte data key + tag, with the
row's identity (deployment, tenant, user, key id) as associated data, so a wrapped key moved to
another row does not unwrap. Pure logic, no I/O apart from reading the key file."""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
KEY_BYTES = 32


class MasterKeyError(RuntimeError):
    """A data key cannot be unwrapped: its master key is missing or not the one that wrapped
    it. Never taken for an erasure (the caller stops or retries: nothing is skipped)."""


def _decode_key(key_id: str, text: str) -> bytes:
    if not _ID.match(key_id):
        raise ValueError(f"master key id {key_id!r} must match {_ID.pattern}")
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"master key {key_id!r} is not base64 (generate one with: memory-agent privacy new-master-key)")\
            from None
    if len(raw) != KEY_BYTES:
        raise ValueError(f"master key {key_id!r} must be {KEY_BYTES} bytes (base64 of 32 random bytes), not {len(raw)}")
    return raw


def read_key_file(path: Path) -> dict[str, str]:
    """A key file: a JSON object {key id: base64 key}."""
    try:
        data = orjson.loads(Path(path).read_bytes())
    except OSError as error:
        raise ValueError(f"master key file {str(path)!r} cannot be read: {error.strerror}") from None
    except orjson.JSONDecodeError:
        raise ValueError(f"master key file {str(path)!r} is not JSON: write {{\"KEY_ID\": \"BASE64 KEY\"}}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError(f"master key file {str(path)!r} must hold a JSON object {{\"KEY_ID\": \"BASE64 KEY\"}}")
    return data


@dataclass(frozen=True)
class MasterKeys:
    """The configured master keys by id, and the one that wraps new data keys (`current`)."""

    keys: dict[str, bytes] = field(default_factory=dict)
    current: str | None = None

    @classmethod
    def of(cls, configured: dict[str, str], current: str | None = None) -> "MasterKeys":
        keys = {key_id: _decode_key(key_id, text) for key_id, text in configured.items()}
        if current is None and len(keys) > 1:
            raise ValueError(f"several master keys ({', '.join(sorted(keys))}): name the one that wraps new"
                             " data keys in MEMORY_PRIVACY__MASTER_KEY_ID")
        if current is not None and current not in keys:
            raise ValueError(f"MEMORY_PRIVACY__MASTER_KEY_ID {current!r} is not among the master keys"
                             f" ({', '.join(sorted(keys)) or 'none configured'})")
        return cls(keys, current if current is not None else next(iter(keys), None))

    def __bool__(self) -> bool:
        return bool(self.keys)

    def __repr__(self) -> str:  # never the keys
        return f"MasterKeys(ids={sorted(self.keys)}, current={self.current!r})"

    def wrap(self, data_key: bytes, identity: bytes) -> tuple[str | None, bytes]:
        """(master key id, stored bytes): wrapped by the current master key, or as it is (id
        None) when no master key is configured (development)."""
        if self.current is None:
            return None, data_key
        nonce = os.urandom(12)
        return self.current, nonce + AESGCM(self.keys[self.current]).encrypt(nonce, data_key, identity)

    def unwrap(self, master_key_id: str | None, stored: bytes, identity: bytes, what: str) -> bytes:
        """The data key of a stored row; MasterKeyError, naming `what` (the row), when it
        cannot be unwrapped."""
        if master_key_id is None:  # stored before wrapping was configured (rewrap wraps it)
            return stored
        key = self.keys.get(master_key_id)
        if key is None:
            configured = ", ".join(sorted(self.keys)) or "none"
            raise MasterKeyError(f"the data key of {what} is wrapped by master key {master_key_id!r}, which is not"
                                 f" configured (configured: {configured}); set it in MEMORY_PRIVACY__MASTER_KEYS or"
                                 " MEMORY_PRIVACY__MASTER_KEY_FILE (docs/security.md)")
        try:
            return AESGCM(key).decrypt(stored[:12], stored[12:], identity)
        except (InvalidTag, ValueError):
            raise MasterKeyError(f"master key {master_key_id!r} does not unwrap the data key of {what}: the key"
                                 f" configured under that id is not the one that wrapped it (wrong master key)") from None


def new_master_key() -> str:
    """Base64 of 32 random bytes: a new master key."""
    return base64.b64encode(AESGCM.generate_key(256)).decode()

"""Crypto-shredding (docs/lineage.md): per-user data keys behind one small port, sealing of
`message.appended` content by the producer, the opener every consumer's decode calls, and
`install`, which also hooks the sealing of derived free text (memory_agent/sealing.py).

`KeyStore` is the port a KMS (AWS KMS, Vault transit) can replace; `PostgresKeyStore` keeps
the keys in `public.data_keys` (raw 256-bit keys: no master-key wrapping yet). Destroying a
user's key overwrites it with NULL: every sealed copy of that user's messages, on the log and
in its backups, then opens as ERASED_CONTENT."""

from __future__ import annotations

import base64
import os
import time
import uuid
from typing import Protocol

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memory_agent import sealing
from memory_agent.settings import Settings
from schemas.codec import encode
from schemas.envelope import Envelope
from schemas.limits import Limits, check_size
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from schemas.sealed import ERASED_CONTENT, SEALED, set_field_opener, set_opener, set_sealer, set_state_hooks

# One key per deployment (its topic prefix: two deployments on one database never share a key,
# nor does an erasure in one destroy another's), tenant and user.
_TABLE = """CREATE TABLE IF NOT EXISTS public.data_keys (
    deployment text NOT NULL, tenant_id text NOT NULL, user_id text NOT NULL, key_id text NOT NULL,
    data_key bytea, created_at timestamptz NOT NULL DEFAULT now(), destroyed_at timestamptz,
    PRIMARY KEY (deployment, tenant_id, user_id))"""
CACHE_S = 60.0  # a key destroyed elsewhere may still open events here for this long


class KeyStore(Protocol):
    def get_or_create(self, tenant: str, user: str) -> tuple[str, bytes]: ...
    def get(self, tenant: str, user: str, key_id: str) -> bytes | None: ...
    def live(self, tenant: str, user: str) -> tuple[str, bytes] | None: ...
    def destroy(self, tenant: str, user: str) -> bool: ...


class PostgresKeyStore:
    """Keys in PostgreSQL (public schema) for one deployment, cached per process for CACHE_S."""

    def __init__(self, dsn: str, deployment: str = "") -> None:
        self.dsn, self.deployment = dsn, deployment
        self._cache: dict[tuple[str, str, str | None], tuple[float, tuple[str, bytes] | None]] = {}
        self._execute = sealing.SyncDatabase(dsn, _TABLE).execute

    def _cached(self, key, load):
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < CACHE_S:
            return hit[1]
        value = load()
        self._cache[key] = (time.monotonic(), value)
        return value

    def _upsert(self, tenant: str, user: str) -> tuple[str, bytes | None]:
        """(key_id, key) of the user, created if it has none; key None when destroyed."""
        rows = self._execute(
            "INSERT INTO public.data_keys (deployment, tenant_id, user_id, key_id, data_key) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (deployment, tenant_id, user_id) DO UPDATE SET key_id = public.data_keys.key_id"
            " RETURNING key_id, data_key", (self.deployment, tenant, user, uuid.uuid4().hex, AESGCM.generate_key(256)))
        return rows[0][0], rows[0][1]

    def get_or_create(self, tenant: str, user: str) -> tuple[str, bytes]:
        def load():
            key_id, data_key = self._upsert(tenant, user)
            if data_key is None:  # erased: a new key for what the user writes from now on
                key_id, data_key = uuid.uuid4().hex, AESGCM.generate_key(256)
                self._execute("UPDATE public.data_keys SET key_id = %s, data_key = %s, destroyed_at = NULL,"
                              " created_at = now() WHERE deployment = %s AND tenant_id = %s AND user_id = %s",
                              (key_id, data_key, self.deployment, tenant, user))
            return key_id, bytes(data_key)
        found = self._cached((tenant, user, None), load)
        self._cache[(tenant, user, "live")] = (time.monotonic(), found)  # a revived key seals derived text too
        return found

    def live(self, tenant: str, user: str) -> tuple[str, bytes] | None:
        """The user's key for sealing derived text: created if the user has none, None when it
        was destroyed (an erased user's words are not sealed under a new, readable key)."""
        def load():
            key_id, data_key = self._upsert(tenant, user)
            return (key_id, bytes(data_key)) if data_key is not None else None
        return self._cached((tenant, user, "live"), load)

    def get(self, tenant: str, user: str, key_id: str) -> bytes | None:
        def load():
            rows = self._execute("SELECT key_id, data_key FROM public.data_keys WHERE deployment = %s AND tenant_id = %s"
                                 " AND user_id = %s AND key_id = %s", (self.deployment, tenant, user, key_id))
            return (rows[0][0], bytes(rows[0][1])) if rows and rows[0][1] is not None else None
        found = self._cached((tenant, user, key_id), load)
        return found[1] if found else None

    def destroy(self, tenant: str, user: str) -> bool:
        rows = self._execute("UPDATE public.data_keys SET data_key = NULL, destroyed_at = now() WHERE deployment ="
                             " %s AND tenant_id = %s AND user_id = %s AND data_key IS NOT NULL RETURNING key_id",
                             (self.deployment, tenant, user))
        self._cache = {k: v for k, v in self._cache.items() if k[:2] != (tenant, user)}
        return bool(rows)


def seal(envelope: Envelope, store: KeyStore) -> Envelope:
    """The envelope with its message content and metadata encrypted by the author's key."""
    if envelope.type != MESSAGE_APPENDED:
        return envelope
    key_id, key = store.get_or_create(envelope.tenant_id, envelope.user_id)
    nonce = os.urandom(12)
    plain = orjson.dumps({"content": envelope.payload["content"], "metadata": envelope.payload.get("metadata") or {}})
    sealed = nonce + AESGCM(key).encrypt(nonce, plain, envelope.event_id.encode())
    payload = {"role": envelope.payload["role"], "content": base64.b64encode(sealed).decode(),
               "metadata": {SEALED: f"v1:{key_id}"}}
    return envelope.model_copy(update={"payload": payload})


def sealed_value(envelope: Envelope, settings: Settings, limits: Limits) -> bytes:
    """The Kafka value of a message sealed with its author's key (the producer checked the
    plaintext against every rule; the sealed event must still fit a record)."""
    raw = encode(seal(envelope, key_store(settings)))
    check_size(raw, limits)
    participants(settings).record(envelope.tenant_id, envelope.conversation_id, envelope.user_id)
    return raw


def opener(store: KeyStore, learn=None):
    """The decode hook: a sealed MessageAppended -> its plaintext, or ERASED_CONTENT when the key
    is gone or the ciphertext does not open (never an exception: no consumer stops on it).
    `learn(tenant, conversation, user)`: told of every message it opens (the sealer's participants)."""
    def open_(envelope, payload: MessageAppended) -> MessageAppended:
        marker = str(payload.metadata.get(SEALED, ""))
        try:
            version, key_id = marker.split(":", 1)
            key = store.get(envelope.tenant_id, envelope.user_id, key_id) if version == "v1" else None
            if key is not None:
                raw = base64.b64decode(payload.content)
                plain = orjson.loads(AESGCM(key).decrypt(raw[:12], raw[12:], envelope.event_id.encode()))
                if learn is not None:
                    learn(envelope.tenant_id, envelope.conversation_id, envelope.user_id)
                return MessageAppended(role=payload.role, content=plain["content"], metadata=plain["metadata"])
        except (ValueError, InvalidTag, KeyError, TypeError):  # not a database error: that is retried
            pass
        return MessageAppended(role=payload.role, content=ERASED_CONTENT, metadata={"erased": True})
    return open_


_stores: dict[tuple[str, str], PostgresKeyStore] = {}
_participants: dict[tuple[str, str], sealing.Participants] = {}


def _deployment(settings: Settings) -> tuple[str, str]:
    return settings.postgres.dsn, settings.kafka.topic_prefix


def key_store(settings: Settings) -> PostgresKeyStore:
    """The process's key store for this database and deployment (topic prefix)."""
    where = _deployment(settings)
    return _stores.setdefault(where, PostgresKeyStore(*where))


def participants(settings: Settings) -> sealing.Participants:
    """Who wrote in which conversation (memory_agent/sealing.py), per database and deployment."""
    where = _deployment(settings)
    return _participants.setdefault(where, sealing.Participants(*where, cache_s=CACHE_S))


def install(settings: Settings) -> None:
    """Make every decode in this process open sealed events (harmless when none are sealed), and
    every encode seal free text when `privacy.encrypt_content` is on (off: nothing is sealed)."""
    store, known = key_store(settings), participants(settings)
    set_opener(opener(store, known.learn))
    set_field_opener(sealing.field_opener(store))
    seals = settings.privacy.encrypt_content
    set_sealer(sealing.sealer(store, known) if seals else None)
    set_state_hooks(sealing.state_sealer(store, known) if seals else None, sealing.state_opener(store))

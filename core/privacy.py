"""Crypto-shredding (docs/lineage.md): per-user data keys behind one small port, sealing of
`message.appended` content by the producer, the opener every consumer's decode calls, and
`install`, which also hooks the sealing of derived free text (core/sealing.py).

`KeyStore` is the port a KMS (AWS KMS, Vault transit) can replace; `PostgresKeyStore` keeps
the keys in `public.data_keys`, wrapped by a master key held outside the database
(core/master_keys.py; stored as they are only when none is configured, which production
refuses). Destroying a user's key overwrites it with NULL: every sealed copy of that user's
messages, on the log and in its backups, then opens as ERASED_CONTENT."""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
import weakref
import uuid
from typing import Protocol

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from core import sealing
from core.master_keys import MasterKeyError, MasterKeys
from core.settings import Settings
from schemas.codec import encode
from schemas.envelope import Envelope
from schemas.limits import Limits, check_size
from schemas.events import MessageAppended
from schemas.registry import MESSAGE_APPENDED
from schemas.sealed import ERASED_CONTENT, SEALED, set_field_opener, set_opener, set_sealer, set_state_hooks

log = logging.getLogger(__name__)

# One key per deployment (its topic prefix: two deployments on one database never share a key,
# nor does an erasure in one destroy another's), tenant and user. `data_key` is wrapped by the
# master key `master_key_id` (NULL: stored as it is, no master key configured).
_TABLE = """CREATE TABLE IF NOT EXISTS public.data_keys (
    deployment text NOT NULL, tenant_id text NOT NULL, user_id text NOT NULL, key_id text NOT NULL,
    data_key bytea, created_at timestamptz NOT NULL DEFAULT now(), destroyed_at timestamptz,
    master_key_id text, PRIMARY KEY (deployment, tenant_id, user_id));
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'public'
                   AND table_name = 'data_keys' AND column_name = 'master_key_id') THEN
        ALTER TABLE public.data_keys ADD COLUMN IF NOT EXISTS master_key_id text;
    END IF;
END $$"""
CACHE_S = 60.0  # a key destroyed elsewhere may still open events here this long (without the broadcast)
CHANNEL = "memory_agent_data_keys_destroyed"  # NOTIFY payload: deployment, tenant, user (newline-separated)


class KeyStore(Protocol):
    def get_or_create(self, tenant: str, user: str) -> tuple[str, bytes]: ...
    def get(self, tenant: str, user: str, key_id: str) -> bytes | None: ...
    def live(self, tenant: str, user: str) -> tuple[str, bytes] | None: ...
    def destroy(self, tenant: str, user: str) -> bool: ...


class PostgresKeyStore:
    """Keys in PostgreSQL (public schema) for one deployment, wrapped by `master` (none: stored
    as they are), cached per process (unwrapped) for CACHE_S. A key that cannot be unwrapped
    raises MasterKeyError: never taken for an erased one."""

    def __init__(self, dsn: str, deployment: str = "", master: MasterKeys | None = None) -> None:
        self.dsn, self.deployment, self.master = dsn, deployment, master or MasterKeys()
        self._cache: dict[tuple[str, str, str | None], tuple[float, tuple[str, bytes] | None]] = {}
        self._lock = threading.Lock()  # the broadcast listener drops entries from its own thread
        self._execute = sealing.SyncDatabase(dsn, _TABLE).execute

    def _identity(self, tenant: str, user: str, key_id: str) -> bytes:
        return "\n".join(("data-key", self.deployment, tenant, user, key_id)).encode()

    def _unwrap(self, tenant: str, user: str, key_id: str, stored, master_key_id: str | None) -> bytes | None:
        if stored is None:
            return None
        return self.master.unwrap(master_key_id, bytes(stored), self._identity(tenant, user, key_id),
                                  f"user {user!r} of tenant {tenant!r} (deployment {self.deployment!r})")

    def _new(self, tenant: str, user: str) -> tuple[str, bytes, str | None, bytes]:
        """(key id, data key, master key id, stored bytes) of a new key."""
        key_id, data_key = uuid.uuid4().hex, AESGCM.generate_key(256)
        return (key_id, data_key, *self.master.wrap(data_key, self._identity(tenant, user, key_id)))

    def _cached(self, key, load):
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < CACHE_S:
            return hit[1]
        value = load()
        with self._lock:
            self._cache[key] = (time.monotonic(), value)
        return value

    def forget(self, tenant: str | None = None, user: str | None = None) -> None:
        """Drop the cached keys of one user (None: of everyone)."""
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if tenant is not None and k[:2] != (tenant, user)}

    def listen(self) -> None:
        """Drop a user's cached keys as soon as any process destroys them (PostgreSQL NOTIFY on
        CHANNEL; one listening connection per process and database), not CACHE_S later."""
        _Listener.of(self.dsn).stores.add(self)

    def _upsert(self, tenant: str, user: str) -> tuple[str, bytes | None]:
        """(key_id, key) of the user, created if it has none; key None when destroyed."""
        key_id, _, master_id, stored = self._new(tenant, user)
        rows = self._execute(
            "INSERT INTO public.data_keys (deployment, tenant_id, user_id, key_id, data_key, master_key_id)"
            " VALUES (%s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (deployment, tenant_id, user_id) DO UPDATE SET key_id = public.data_keys.key_id"
            " RETURNING key_id, data_key, master_key_id", (self.deployment, tenant, user, key_id, stored, master_id))
        found_id, found, found_master = rows[0]
        return found_id, self._unwrap(tenant, user, found_id, found, found_master)

    def get_or_create(self, tenant: str, user: str) -> tuple[str, bytes]:
        def load():
            key_id, data_key = self._upsert(tenant, user)
            if data_key is None:  # erased: a new key for what the user writes from now on
                key_id, data_key, master_id, stored = self._new(tenant, user)
                self._execute("UPDATE public.data_keys SET key_id = %s, data_key = %s, master_key_id = %s,"
                              " destroyed_at = NULL, created_at = now() WHERE deployment = %s AND tenant_id = %s"
                              " AND user_id = %s", (key_id, stored, master_id, self.deployment, tenant, user))
            return key_id, bytes(data_key)
        found = self._cached((tenant, user, None), load)
        with self._lock:
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
            rows = self._execute("SELECT key_id, data_key, master_key_id FROM public.data_keys WHERE deployment = %s"
                                 " AND tenant_id = %s AND user_id = %s AND key_id = %s",
                                 (self.deployment, tenant, user, key_id))
            if not rows or rows[0][1] is None:
                return None
            return rows[0][0], self._unwrap(tenant, user, *rows[0])
        found = self._cached((tenant, user, key_id), load)
        return found[1] if found else None

    def destroy(self, tenant: str, user: str) -> bool:
        rows = self._execute("UPDATE public.data_keys SET data_key = NULL, destroyed_at = now() WHERE deployment ="
                             " %s AND tenant_id = %s AND user_id = %s AND data_key IS NOT NULL RETURNING key_id",
                             (self.deployment, tenant, user))
        self.forget(tenant, user)
        # Every other process drops its cached copy now (the listeners); sent after the commit.
        self._execute("SELECT pg_notify(%s, %s)", (CHANNEL, "\n".join((self.deployment, tenant, user))))
        return bool(rows)

    def check(self) -> dict[str, int]:
        """Unwrap one live key per master key id of this deployment: MasterKeyError at start-up
        (a missing or wrong master key) rather than at the first event. Returns the number of
        live keys per master key id ("" for keys stored as they are)."""
        rows = self._execute(
            "SELECT DISTINCT ON (master_key_id) master_key_id, tenant_id, user_id, key_id, data_key,"
            " count(*) OVER (PARTITION BY master_key_id) FROM public.data_keys WHERE deployment = %s"
            " AND data_key IS NOT NULL ORDER BY master_key_id, created_at DESC", (self.deployment,))
        for master_id, tenant, user, key_id, stored, _ in rows:
            self._unwrap(tenant, user, key_id, stored, master_id)
        return {master_id or "": count for master_id, *_, count in rows}

    def rewrap(self, batch: int = 500) -> int:
        """Wrap every live key of this deployment not wrapped by the current master key (an
        older master key, or none) with the current one; returns how many. Each batch is one
        transaction (rows locked, SKIP LOCKED). Run after adding a new master key as current,
        keeping the old one configured until this returns."""
        import psycopg  # noqa: PLC0415

        if self.master.current is None:
            raise MasterKeyError("no master key configured: set MEMORY_PRIVACY__MASTER_KEYS (and"
                                 " MEMORY_PRIVACY__MASTER_KEY_ID) before re-wrapping")
        done = 0
        with psycopg.connect(self.dsn) as conn:
            conn.execute(_TABLE)
            conn.commit()
            while True:
                with conn.transaction():
                    rows = conn.execute(
                        "SELECT tenant_id, user_id, key_id, data_key, master_key_id FROM public.data_keys"
                        " WHERE deployment = %s AND data_key IS NOT NULL AND master_key_id IS DISTINCT FROM %s"
                        " LIMIT %s FOR UPDATE SKIP LOCKED", (self.deployment, self.master.current, batch)).fetchall()
                    for tenant, user, key_id, stored, master_id in rows:
                        data_key = self._unwrap(tenant, user, key_id, stored, master_id)
                        new_master, wrapped = self.master.wrap(data_key, self._identity(tenant, user, key_id))
                        conn.execute("UPDATE public.data_keys SET data_key = %s, master_key_id = %s WHERE deployment"
                                     " = %s AND tenant_id = %s AND user_id = %s AND key_id = %s",
                                     (wrapped, new_master, self.deployment, tenant, user, key_id))
                done += len(rows)
                if len(rows) < batch:
                    return done


class _Listener:
    """One thread and connection per process and database, LISTENing on CHANNEL: each
    notification drops that user's cached keys in every registered store of its deployment.
    After a lost connection every store's cache is dropped (notifications may have been missed)
    and it listens again; meanwhile the CACHE_S expiry still holds."""

    _by_dsn: dict[str, "_Listener"] = {}
    _guard = threading.Lock()

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.stores: weakref.WeakSet[PostgresKeyStore] = weakref.WeakSet()
        self.listening = threading.Event()
        threading.Thread(target=self._run, name="data-key-destroys", daemon=True).start()

    @classmethod
    def of(cls, dsn: str) -> "_Listener":
        with cls._guard:
            if dsn not in cls._by_dsn:
                cls._by_dsn[dsn] = cls(dsn)
            return cls._by_dsn[dsn]

    def _run(self) -> None:
        import psycopg  # noqa: PLC0415

        pause = 1.0
        while True:
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    for store in list(self.stores):
                        store.forget()
                    self.listening.set()
                    pause = 1.0
                    for note in conn.notifies():
                        self._apply(note.payload)
            except Exception as error:  # noqa: BLE001 - never let the thread die: the expiry still holds
                self.listening.clear()
                log.warning("data key destroys: not listening (%s); again in %.0f s", error, pause)
                time.sleep(pause)
                pause = min(pause * 2, 30.0)

    def _apply(self, payload: str) -> None:
        parts = payload.split("\n")
        if len(parts) != 3:
            return
        deployment, tenant, user = parts
        for store in list(self.stores):
            if store.deployment == deployment:
                store.forget(tenant, user)


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


_stores: dict[tuple, PostgresKeyStore] = {}
_participants: dict[tuple[str, str], sealing.Participants] = {}


def _deployment(settings: Settings) -> tuple[str, str]:
    return settings.postgres.dsn, settings.kafka.topic_prefix


def key_store(settings: Settings) -> PostgresKeyStore:
    """The process's key store for this database and deployment (topic prefix)."""
    where, master = _deployment(settings), settings.privacy.master_key_ring
    ident = (*where, master.current, tuple(sorted(master.keys.items())))
    if ident not in _stores:
        _stores[ident] = PostgresKeyStore(*where, master)
    return _stores[ident]


def participants(settings: Settings) -> sealing.Participants:
    """Who wrote in which conversation (core/sealing.py), per database and deployment."""
    where = _deployment(settings)
    return _participants.setdefault(where, sealing.Participants(*where, cache_s=CACHE_S))


def install(settings: Settings) -> None:
    """Make every decode in this process open sealed events (harmless when none are sealed), and
    every encode seal free text when `privacy.encrypt_content` is on (off: nothing is sealed)."""
    store, known = key_store(settings), participants(settings)
    if settings.privacy.encrypt_content or settings.privacy.master_key_ring:
        check_master_keys(store)
        store.listen()
    set_opener(opener(store, known.learn))
    set_field_opener(sealing.field_opener(store))
    seals = settings.privacy.encrypt_content
    set_sealer(sealing.sealer(store, known) if seals else None)
    set_state_hooks(sealing.state_sealer(store, known) if seals else None, sealing.state_opener(store))


def check_master_keys(store: PostgresKeyStore) -> None:
    """At start-up: MasterKeyError when a stored key's master key is missing or wrong. PostgreSQL
    unreachable is only logged (the API starts and says so in /readyz; every key lookup raises)."""
    import psycopg  # noqa: PLC0415

    try:
        counts = store.check()
    except psycopg.OperationalError as error:
        log.warning("data keys not checked against the master keys (PostgreSQL unreachable): %s", error)
        return
    if counts.get("") and store.master:
        log.warning("%d data keys of deployment %r are stored without a master key: run `memory-agent privacy"
                    " rewrap` (docs/security.md)", counts[""], store.deployment)

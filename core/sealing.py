"""Sealing of derived free text (docs/lineage.md, crypto-shredding): whose keys seal an event,
and the sealer and field opener schemas/sealed.py calls from the one shared encode and decode.

A derived text (a summary, a chunk and its facts, a topic title or compaction, a fact's
content in a management event, a served query) may mix the words of every user who wrote in
its conversation. It is sealed with the keys of all of them: the conversation's participants
(`public.sealing_participants`, per deployment, written by the message producer before a message is sent,
and learnt by this process from every sealed message it opens), the envelope's user and the
payload's owner. One AES-256-GCM ciphertext under a key derived (HKDF-SHA256) from every listed
key: losing any one of them makes the text unreadable. A participant whose key is destroyed is
left out (their messages now open as "[erased]", so new derivations hold none of their words);
an event whose every contributor is erased is sealed under a throwaway key, unreadable at birth."""

from __future__ import annotations

import base64
import functools
import os
import threading
import time

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from schemas.envelope import Envelope, InvalidEvent
from schemas.sealed import SEALED

_TABLE = """CREATE TABLE IF NOT EXISTS public.sealing_participants (
    deployment text NOT NULL, tenant_id text NOT NULL, conversation_id text NOT NULL, user_id text NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (deployment, tenant_id, conversation_id, user_id))"""
_INFO = b"memory-agent sealed fields v1"


def combined_key(keys: list[bytes]) -> bytes:
    """One AES-256 key from every contributor's key (in the listed order)."""
    return keys[0] if len(keys) == 1 else _derived(tuple(keys))


@functools.lru_cache(maxsize=1024)
def _derived(keys: tuple[bytes, ...]) -> bytes:
    # Reached only with every component key in hand (a destroyed one is refused before).
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(b"".join(keys))


def _aad(envelope: Envelope) -> bytes:
    return f"{envelope.type}\n{envelope.event_id}".encode()


def marker(plain: bytes, aad: bytes, keys: list[tuple[str, str, bytes]]) -> dict:
    """{"v", "keys", "ct"}: `plain` sealed under `keys` [(user, key_id, key)]; no keys: a
    throwaway key (nobody can open it)."""
    chosen = sorted(keys) or [("", "destroyed", AESGCM.generate_key(256))]
    nonce = os.urandom(12)
    ct = AESGCM(combined_key([k for _, _, k in chosen])).encrypt(nonce, plain, aad)
    return {"v": 1, "keys": [[user, key_id] for user, key_id, _ in chosen], "ct": base64.b64encode(nonce + ct).decode()}


def unseal(sealed: object, tenant: str, aad: bytes, find) -> bytes:
    """The plaintext of a `marker`; `find(tenant, user, key_id)` -> key or None. Raises
    InvalidEvent("erased") when a key is gone or the ciphertext does not open."""
    try:
        if not isinstance(sealed, dict) or sealed.get("v") != 1:
            raise ValueError(f"unknown seal {str(sealed)[:40]!r}")
        keys = [find(tenant, user, key_id) for user, key_id in sealed["keys"]]
        if not keys or any(k is None for k in keys):
            raise InvalidEvent("erased", "a contributor's key is destroyed")
        raw = base64.b64decode(sealed["ct"])
        return AESGCM(combined_key(keys)).decrypt(raw[:12], raw[12:], aad)
    except InvalidEvent:
        raise
    except (ValueError, InvalidTag, KeyError, TypeError) as exc:
        raise InvalidEvent("erased", f"does not open: {type(exc).__name__}") from None


def seal_with(envelope: Envelope, fields: dict, keys: list[tuple[str, str, bytes]]) -> Envelope:
    """`envelope` (its free text already taken out) with `fields` sealed under `keys`."""
    sealed = marker(orjson.dumps(fields), _aad(envelope), keys)
    return envelope.model_copy(update={"payload": {**envelope.payload, SEALED: sealed}})


def open_with(envelope: Envelope, find) -> dict:
    """The plaintext fields of a sealed event, or InvalidEvent("erased")."""
    try:
        return orjson.loads(unseal(envelope.payload.get(SEALED), envelope.tenant_id, _aad(envelope), find))
    except InvalidEvent as exc:
        raise InvalidEvent("erased", f"{envelope.type} {envelope.event_id}: {exc.detail}") from None


class SyncDatabase:
    """One autocommit connection for the key lookups, which run inside the synchronous decode
    and encode (any thread); `ddl` creates the table on each new connection."""

    def __init__(self, dsn: str, ddl: str) -> None:
        self.dsn, self.ddl = dsn, ddl
        self._lock = threading.Lock()
        self._conn = None

    def execute(self, sql: str, params=()) -> list[tuple]:
        import psycopg  # noqa: PLC0415

        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.dsn, autocommit=True)
                self._conn.execute(self.ddl)
            cur = self._conn.execute(sql, params)
            return cur.fetchall() if cur.description else []


class Participants:
    """Who wrote in which conversation: PostgreSQL, cached per process for `cache_s`, plus
    what this process learnt from the sealed messages it opened."""

    def __init__(self, dsn: str, deployment: str = "", *, cache_s: float = 60.0) -> None:
        self.dsn, self.deployment, self.cache_s = dsn, deployment, cache_s
        self._cache: dict[tuple[str, str], tuple[float, set[str]]] = {}
        self._recorded: set[tuple[str, str, str]] = set()
        self._execute = SyncDatabase(dsn, _TABLE).execute

    def record(self, tenant: str, conversation: str, user: str) -> None:
        """A producer: `user` writes in `conversation` (once per process)."""
        if (tenant, conversation, user) in self._recorded:
            return
        self._execute("INSERT INTO public.sealing_participants (deployment, tenant_id, conversation_id, user_id)"
                      " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING", (self.deployment, tenant, conversation, user))
        self._recorded.add((tenant, conversation, user))
        self.learn(tenant, conversation, user)

    def learn(self, tenant: str, conversation: str, user: str) -> None:
        hit = self._cache.get((tenant, conversation))
        if hit is not None:
            hit[1].add(user)

    def of(self, tenant: str, conversation: str) -> set[str]:
        hit = self._cache.get((tenant, conversation))
        if hit is not None and time.monotonic() - hit[0] < self.cache_s:
            return hit[1]
        users = {u for (u,) in self._execute("SELECT user_id FROM public.sealing_participants WHERE deployment = %s"
                                             " AND tenant_id = %s AND conversation_id = %s",
                                             (self.deployment, tenant, conversation))}
        if hit is not None:
            users |= hit[1]  # learnt here meanwhile
        self._cache[(tenant, conversation)] = (time.monotonic(), users)
        return users


def contributors(envelope: Envelope, participants: set[str]) -> list[str]:
    """Every user whose words an event's free text may hold."""
    users = set(participants) | {envelope.user_id}
    owner = envelope.payload.get("owner_user_id")
    if isinstance(owner, str) and owner:
        users.add(owner)
    return sorted(users)


def sealer(store, participants: Participants):
    """The hook of schemas.sealed.set_sealer: seal with every live contributor key."""
    def seal_(envelope: Envelope, fields: dict) -> Envelope:
        users = contributors(envelope, participants.of(envelope.tenant_id, envelope.conversation_id))
        return seal_with(envelope, fields, live_keys(store, envelope.tenant_id, users))
    return seal_


def field_opener(store):
    return lambda envelope: open_with(envelope, store.get)


def live_keys(store, tenant: str, users) -> list[tuple[str, str, bytes]]:
    keys = []
    for user in users:
        found = store.live(tenant, user)
        if found is not None:
            keys.append((user, *found))
    return keys


def state_sealer(store, participants: Participants):
    """Fold state (a changelog value) of one conversation, sealed with its participants' keys;
    None (left plain) for a conversation nobody sealed a message in."""
    def seal_(tenant: str, conversation: str, raw: bytes) -> bytes | None:
        users = participants.of(tenant, conversation)
        if not users:
            return None
        sealed = marker(raw, f"state\n{tenant}/{conversation}".encode(), live_keys(store, tenant, sorted(users)))
        return orjson.dumps({SEALED: sealed})
    return seal_


def state_opener(store):
    """A sealed fold state -> its bytes, or None when a contributor's key is destroyed."""
    def open_(tenant: str, conversation: str, raw: bytes) -> bytes | None:
        try:
            return unseal(orjson.loads(raw).get(SEALED), tenant, f"state\n{tenant}/{conversation}".encode(), store.get)
        except (InvalidEvent, orjson.JSONDecodeError, AttributeError):
            return None
    return open_

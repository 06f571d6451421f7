"""Sealing of derived free text (docs/lineage.md, crypto-shredding): whose keys seal an event,
and the sealer and field opener schemas/sealed.py calls from the one shared encode and decode.

A derived text (a summary, a chunk and its facts, a topic title or compaction, a fact's
content in a management event, a served query) may mix the words of every user who wrote in
its conversation. It is sealed with the keys of all of them: the conversation's participants
(`public.conversation_participants`, written by the message producer before a message is sent,
and learnt by this process from every sealed message it opens), the envelope's user and the
payload's owner. One AES-256-GCM ciphertext under a key derived (HKDF-SHA256) from every listed
key: losing any one of them makes the text unreadable. A participant whose key is destroyed is
left out (their messages now open as "[erased]", so new derivations hold none of their words);
an event whose every contributor is erased is sealed under a throwaway key, unreadable at birth."""

from __future__ import annotations

import base64
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

_TABLE = """CREATE TABLE IF NOT EXISTS public.conversation_participants (
    tenant_id text NOT NULL, conversation_id text NOT NULL, user_id text NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (tenant_id, conversation_id, user_id))"""
_INFO = b"memory-agent sealed fields v1"


def combined_key(keys: list[bytes]) -> bytes:
    """One AES-256 key from every contributor's key (in the listed order)."""
    if len(keys) == 1:
        return keys[0]
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(b"".join(keys))


def _aad(envelope: Envelope) -> bytes:
    return f"{envelope.type}\n{envelope.event_id}".encode()


def seal_with(envelope: Envelope, fields: dict, keys: list[tuple[str, str, bytes]]) -> Envelope:
    """`envelope` (its free text already taken out) with `fields` sealed under `keys`
    [(user, key_id, key)]; no keys: a throwaway key (nobody can open it)."""
    chosen = sorted(keys) or [("", "destroyed", AESGCM.generate_key(256))]
    nonce = os.urandom(12)
    ct = AESGCM(combined_key([k for _, _, k in chosen])).encrypt(nonce, orjson.dumps(fields), _aad(envelope))
    marker = {"v": 1, "keys": [[user, key_id] for user, key_id, _ in chosen],
              "ct": base64.b64encode(nonce + ct).decode()}
    return envelope.model_copy(update={"payload": {**envelope.payload, SEALED: marker}})


def open_with(envelope: Envelope, find) -> dict:
    """The plaintext fields of a sealed event; `find(tenant, user, key_id)` -> key or None.
    Raises InvalidEvent("erased") when a key is gone or the ciphertext does not open."""
    marker = envelope.payload.get(SEALED)
    try:
        if not isinstance(marker, dict) or marker.get("v") != 1:
            raise ValueError(f"unknown seal {str(marker)[:40]!r}")
        keys = [find(envelope.tenant_id, user, key_id) for user, key_id in marker["keys"]]
        if not keys or any(k is None for k in keys):
            raise InvalidEvent("erased", f"{envelope.type} {envelope.event_id}: a contributor's key is destroyed")
        raw = base64.b64decode(marker["ct"])
        return orjson.loads(AESGCM(combined_key(keys)).decrypt(raw[:12], raw[12:], _aad(envelope)))
    except (ValueError, InvalidTag, KeyError, TypeError) as exc:  # InvalidEvent is a ValueError: kept as is
        if isinstance(exc, InvalidEvent):
            raise
        raise InvalidEvent("erased", f"{envelope.type} {envelope.event_id} does not open: {type(exc).__name__}") from None


class Participants:
    """Who wrote in which conversation: PostgreSQL, cached per process for `cache_s`, plus
    what this process learnt from the sealed messages it opened."""

    def __init__(self, dsn: str, cache_s: float = 60.0) -> None:
        self.dsn, self.cache_s = dsn, cache_s
        self._cache: dict[tuple[str, str], tuple[float, set[str]]] = {}
        self._recorded: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()
        self._conn = None

    def _execute(self, sql: str, params) -> list[tuple]:
        import psycopg  # noqa: PLC0415

        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.dsn, autocommit=True)
                self._conn.execute(_TABLE)
            cur = self._conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def record(self, tenant: str, conversation: str, user: str) -> None:
        """A producer: `user` writes in `conversation` (once per process)."""
        if (tenant, conversation, user) in self._recorded:
            return
        self._execute("INSERT INTO public.conversation_participants (tenant_id, conversation_id, user_id)"
                      " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", (tenant, conversation, user))
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
        users = {u for (u,) in self._execute("SELECT user_id FROM public.conversation_participants WHERE tenant_id = %s"
                                             " AND conversation_id = %s", (tenant, conversation))}
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
        keys = []
        for user in users:
            found = store.live(envelope.tenant_id, user)
            if found is not None:
                keys.append((user, *found))
        return seal_with(envelope, fields, keys)
    return seal_


def field_opener(store):
    return lambda envelope: open_with(envelope, store.get)

"""Who is calling and for whom it may act: API keys -> principals, and the acting-user rules.

Keys are kept only as SHA-256 digests and compared in constant time (hmac.compare_digest,
against every configured key). docs/security.md describes the guarantees.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass

from fastapi import HTTPException, status

from core.settings import ActAs, ApiSettings, key_digest

audit = logging.getLogger("memory_agent.audit")


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its tenant, the user it is bound to (if any), its act-as scope."""

    tenant: str
    user: str | None
    act_as: ActAs
    key_name: str


class KeyRing:
    """Configured keys as digests; `lookup` hashes the presented key and compares it with all."""

    def __init__(self, entries: list[tuple[bytes, Principal]]) -> None:
        self._entries = entries

    @classmethod
    def for_api(cls, api: ApiSettings) -> "KeyRing":
        entries = []
        for key, grant in api.grants().items():
            digest = key_digest(key)
            name = grant.name or f"sha256:{digest.hex()[:8]}"
            entries.append((digest, Principal(grant.tenant, grant.user, grant.scope, name)))
        return cls(entries)

    @classmethod
    def for_admin(cls, api: ApiSettings) -> "KeyRing":
        return cls([(key_digest(k), Principal("*", None, "nobody", f"admin sha256:{key_digest(k).hex()[:8]}"))
                    for k in api.admin_keys])

    @classmethod
    def for_metrics(cls, api: ApiSettings) -> "KeyRing":
        """Who may scrape /metrics: the metrics keys and the admin keys."""
        return cls([(key_digest(k), Principal("*", None, "nobody", f"metrics sha256:{key_digest(k).hex()[:8]}"))
                    for k in [*api.metrics_keys, *api.admin_keys]])

    def lookup(self, presented: str | None) -> Principal | None:
        """The principal of a presented key; None for a missing, empty or unknown key. Every
        configured digest is compared (no early exit), each in constant time."""
        if not presented:
            return None
        digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
        found = None
        for configured, principal in self._entries:
            if hmac.compare_digest(configured, digest):
                found = principal
        return found


def forbidden(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, detail=detail)


def may_read_tenant(principal: Principal, what: str) -> None:
    """Tenant-wide reads (the conversation list, stats, throughput): a service key that acts for
    users; a producer key (act_as nobody) reads nothing, a key bound to a user reads no totals."""
    if principal.user is not None:
        raise forbidden(f"{what} are per tenant: use a service key")
    if principal.act_as == "nobody":
        raise forbidden(f"this key may not read any user's memory (act_as: nobody): no {what}")


def conversation_user(principal: Principal, owner: str, named: str | None, action: str) -> str | None:
    """Whose memory a request on a conversation owned by `owner` reads, or None when the key
    may not see this conversation at all (answered 404, like a conversation that does not exist).
    `named` is the user the caller asked for (?user_id=)."""
    if principal.user is not None:
        if owner != principal.user:
            return None
        if named is not None and named != principal.user:
            raise forbidden(f"this key acts only as user {principal.user!r}")
        return principal.user
    if principal.act_as == "nobody":
        raise forbidden("this key may not read any user's memory (act_as: nobody)")
    user = owner if named is None else named
    if user != owner and principal.act_as != "any_user":
        raise forbidden("this key acts only as the conversation's owner: it may not name another user"
                        " (grant act_as any_user, docs/security.md)")
    audit.info("act-as key=%s tenant=%s user=%s owner=%s action=%s",
               principal.key_name, principal.tenant, user, owner, action)
    return user


def named_user(principal: Principal, named: str | None, action: str) -> str:
    """The acting user of a request outside any conversation (the facts endpoints)."""
    if principal.user is not None:
        if named is not None and named != principal.user:
            raise forbidden(f"this key acts only as user {principal.user!r}")
        return principal.user
    if principal.act_as != "any_user":
        raise forbidden("this key may not act for a named user: use a key bound to the user,"
                        " or grant the service key act_as any_user (docs/security.md)")
    if not named:
        raise HTTPException(status.HTTP_400_BAD_REQUEST,
                            detail="a service key names the acting user with the X-User-Id header")
    audit.info("act-as key=%s tenant=%s user=%s action=%s", principal.key_name, principal.tenant, named, action)
    return named


def writer_may_append(principal: Principal, user_id: object, owner: str | None, other_user: bool = False) -> None:
    """A key bound to a user appends only as that user and only to its own conversations. A
    conversation's owner is fixed by its first message: a message for another user is refused
    (409) unless the key may act for any user and says so (`other_user`, ?other_user=true)."""
    if principal.user is not None:
        if user_id != principal.user:
            raise forbidden(f"this key acts only as user {principal.user!r}: user_id must be {principal.user!r}")
        if owner is not None and owner != principal.user:
            raise forbidden("this conversation belongs to another user")
        return
    if owner is None or owner == user_id:
        return
    if not other_user:
        raise HTTPException(status.HTTP_409_CONFLICT, detail={
            "reason": "owner_conflict",
            "message": f"this conversation belongs to user {owner!r} (its first message): a message for"
                       f" {user_id!r} is refused; a key granted act_as any_user may add it with ?other_user=true"})
    if principal.act_as != "any_user":
        raise forbidden("only a key granted act_as any_user may write another user's message into a conversation"
                        " (?other_user=true)")
    audit.info("act-as key=%s tenant=%s user=%s owner=%s action=append other user's message",
               principal.key_name, principal.tenant, user_id, owner)

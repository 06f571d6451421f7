"""Messages an applied erasure covers, for the projectors that read `message.appended` from the
log (docs/lineage.md, "Messages reached after the erasure"): the messages projector does not
project them, the message index does not embed them. The rule is domain/erasure.py's.

One query per batch, for the batch's tenants, users and conversations; a generation that never
erased answers it from an empty table."""

from __future__ import annotations

from collections.abc import Iterable

import psycopg
from aiokafka.structs import ConsumerRecord

from domain.erasure import AppliedErasure, LogPosition, erased_by

_APPLIED = (
    "SELECT event_id, tenant_id, erased_user_id, conversation_ids, rederive, log_partition, log_offset,"
    " (extract(epoch FROM COALESCE(logged_at, requested_at)) * 1000)::bigint, log_bound FROM erasures"
    " WHERE tenant_id = ANY(%s::text[]) AND (erased_user_id = ANY(%s::text[]) OR conversation_ids && %s::text[])"
)

# (tenant, conversation, user, record) of one message
Message = tuple[str, str, str, ConsumerRecord]


def position(record: ConsumerRecord) -> LogPosition:
    return LogPosition(record.partition, record.offset, record.timestamp)


async def applied_erasures(conn: psycopg.AsyncConnection, messages: Iterable[Message]) -> list[AppliedErasure]:
    """The applied erasures that may cover any of `messages`."""
    tenants, conversations, users = set(), set(), set()
    for tenant, conversation, user, _ in messages:
        tenants.add(tenant)
        conversations.add(conversation)
        users.add(user)
    if not tenants:
        return []
    cur = await conn.execute(_APPLIED, (sorted(tenants), sorted(users), sorted(conversations)))
    return [AppliedErasure(event_id, tenant, user, frozenset(conversation_ids) - frozenset(rederive or {}),
                           LogPosition(-1 if partition is None else partition, offset or 0, timestamp_ms),
                           {int(p): o for p, o in bound.items()} if bound else None)
            for event_id, tenant, user, conversation_ids, rederive, partition, offset, timestamp_ms, bound
            in await cur.fetchall()]


async def erased_messages(conn: psycopg.AsyncConnection, messages: dict) -> dict:
    """{key: erasure event id} of the `messages` ({key: Message}) an applied erasure covers."""
    if not messages:
        return {}
    erasures = await applied_erasures(conn, messages.values())
    if not erasures:
        return {}
    found = {}
    for key, (tenant, conversation, user, record) in messages.items():
        erasure = erased_by(erasures, tenant, conversation, user, position(record))
        if erasure is not None:
            found[key] = erasure
    return found

"""Where an LLM-cache entry came from (docs/lineage.md): the events a stage was answering when
the entry was written or served, so an erasure finds the entries by provenance, not only by
their text.

A stage runner sets the requests it is handling (`serving`); `LlmCache.put` and its hits record
one row per (entry, tenant, conversation) in `public.llm_cache_sources` (projections/control.sql)
with the user and the request's event id; the entry itself holds the model and prompt version.
`erase` deletes the entries any erased conversation contributed to (the erasure projector calls
it in its transaction). A call made outside a stage (a batch replay's bulk lookups) records
nothing: the erasure's match on the entry's text still applies to those."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any, NamedTuple


class Source(NamedTuple):
    tenant_id: str
    conversation_id: str
    user_id: str
    event_id: str


_serving: ContextVar[tuple[Source, ...]] = ContextVar("llm_provenance", default=())


def sources_of(events: Iterable[Any]) -> tuple[Source, ...]:
    """The provenance of decoded events (schemas.codec.Event): one per conversation."""
    out: dict[tuple[str, str], Source] = {}
    for event in events:
        e = event.envelope
        out.setdefault((e.tenant_id, e.conversation_id), Source(e.tenant_id, e.conversation_id, e.user_id, e.event_id))
    return tuple(out.values())


@contextlib.contextmanager
def serving(events: Iterable[Any]) -> Iterator[None]:
    """LLM calls made inside (this task and the tasks it starts) are on behalf of `events`."""
    token = _serving.set(sources_of(events))
    try:
        yield
    finally:
        _serving.reset(token)


def current() -> tuple[Source, ...]:
    return _serving.get()


_RECORD = ("INSERT INTO public.llm_cache_sources (cache_key, tenant_id, conversation_id, user_id, event_id)"
           " SELECT k, s.t, s.c, s.u, s.e FROM unnest(%s::text[]) k,"
           " unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS s(t, c, u, e) ON CONFLICT DO NOTHING")


async def record(conn, keys: list[str], sources: tuple[Source, ...] | None = None) -> None:
    """Rows for `keys` x the sources being served (nothing outside a stage)."""
    statement = recording(keys, sources)
    if statement is not None:
        await conn.execute(*statement)


def recording(keys: list[str], sources: tuple[Source, ...] | None = None) -> tuple[str, tuple] | None:
    """`record`'s statement and parameters (None when there is nothing to record): for a caller
    that runs it as part of one statement of its own (`LlmCache.put`: the entry and its sources)."""
    sources = current() if sources is None else sources
    if not keys or not sources:
        return None
    return _RECORD, (keys, *([list(column) for column in zip(*sources, strict=True)]))


async def erase(conn, tenant_id: str, conversation_ids: list[str]) -> int:
    """Delete the cache entries the conversations contributed to (and their source rows);
    the number of entries deleted."""
    if not conversation_ids:
        return 0
    cur = await conn.execute(
        "DELETE FROM public.llm_cache c WHERE c.cache_key IN (SELECT cache_key FROM public.llm_cache_sources"
        " WHERE tenant_id = %s AND conversation_id = ANY(%s::text[])) RETURNING cache_key", (tenant_id, conversation_ids))
    keys = [key for (key,) in await cur.fetchall()]
    await conn.execute("DELETE FROM public.llm_cache_sources WHERE (tenant_id = %s AND conversation_id = ANY(%s::text[]))"
                       " OR cache_key = ANY(%s::text[])", (tenant_id, conversation_ids, keys))
    return len(keys)

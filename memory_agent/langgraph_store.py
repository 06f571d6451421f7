"""LangGraph's long-term memory store (`BaseStore`) backed by Memory Agent's HTTP API.

    pip install 'memory-agent[langgraph]'

A namespace is `(user_id,)` or `(user_id, subject_id)`; an item is one memory (a fact) of that
user. `put` stores a memory through the service (embedded, deduplicated, an event in the log, so a
replay keeps it) with the item's key as a `key:` tag; `search` is the service's hybrid search (by
meaning and keywords, relevance x importance x recency), over the memories the service extracted
from the user's conversations as well; `get` and `delete` find the item by its key, or by the
memory id for a memory the service extracted itself. `turn_context` gives what to prepend at the
start of a turn. The API key decides the tenant; the namespace names the user (a service key
granted `act_as: any_user`, or a key bound to that user). Example: examples/langgraph_memory_app.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore, GetOp, Item, ListNamespacesOp, Op, PutOp, Result, SearchItem, SearchOp,
)

from memory_agent.api_client import ApiError, Connection, MemoryApi

KEY_TAG = "key:"


class MemoryAgentStore(BaseStore):
    """`BaseStore` over one API key: tools and nodes read and write the user's own memory."""

    supports_ttl = False

    def __init__(self, url: str, api_key: str, *, timeout_s: float = 30.0) -> None:
        self.connection = Connection(url.rstrip("/"), api_key, None, timeout_s)

    def _api(self, namespace: tuple[str, ...]) -> MemoryApi:
        if not namespace or not namespace[0]:
            raise ValueError("a Memory Agent namespace starts with the user id: (user_id,) or (user_id, subject_id)")
        return MemoryApi(replace(self.connection, user=namespace[0]))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return asyncio.run(self.abatch(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return [await self._apply(op) for op in ops]

    async def _apply(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return await self._get(op.namespace, op.key)
        if isinstance(op, PutOp):
            return await self._put(op)
        if isinstance(op, SearchOp):
            return await self._search(op)
        if isinstance(op, ListNamespacesOp):
            return await self._namespaces(op)
        raise TypeError(f"unknown store operation {type(op).__name__}")

    async def _facts(self, api: MemoryApi, namespace: tuple[str, ...]) -> list[dict]:
        subject = namespace[1] if len(namespace) > 1 else None
        return (await api.list_memories(subject_id=subject))["facts"]

    async def _find(self, api: MemoryApi, namespace: tuple[str, ...], key: str) -> dict | None:
        facts = await self._facts(api, namespace)
        return next((f for f in facts if key_of(f) == key), None)

    async def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        async with self._api(namespace) as api:
            fact = await self._find(api, namespace, key)
            return None if fact is None else item_of(fact, namespace)

    async def _put(self, op: PutOp) -> None:
        async with self._api(op.namespace) as api:
            found = await self._find(api, op.namespace, op.key)
            if op.value is None:
                if found is not None and found["mine"]:
                    await api.forget(found["fact_id"])
                return None
            content = content_of(op.value)
            if found is not None and found["mine"]:
                if found["content"] != content:
                    await api.edit(found["fact_id"], content)
                return None
            tags = [f"{KEY_TAG}{op.key}", *[str(t) for t in op.value.get("tags", [])]]
            await api.store(content, category=str(op.value.get("category", "other")),
                            importance=int(op.value.get("importance", 3)), tags=tags[:20],
                            subject_id=op.namespace[1] if len(op.namespace) > 1 else None)
        return None

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        namespace = op.namespace_prefix
        async with self._api(namespace) as api:
            facts = await self._facts(api, namespace)
            if not op.query:
                chosen = [(f, None) for f in sorted(facts, key=lambda f: f["updated_at"], reverse=True)]
            else:
                by_id = {f["fact_id"]: f for f in facts}
                found = await api.search(op.query, kinds=["fact"], k=min(50, op.offset + op.limit),
                                         subject_id=namespace[1] if len(namespace) > 1 else None)
                chosen = [(by_id[i["id"]], i["score"]["final"]) for i in found["items"] if i["id"] in by_id]
        matching = [(f, s) for f, s in chosen if _matches(item_of(f, namespace).value, op.filter)]
        return [search_item(f, namespace, score) for f, score in matching[op.offset:op.offset + op.limit]]

    async def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        """The subjects of a user named by a prefix condition (users cannot be listed through a key)."""
        prefixes = [c.path for c in op.match_conditions or () if c.match_type == "prefix" and c.path]
        found: set[tuple[str, ...]] = set()
        for prefix in prefixes:
            try:
                async with self._api(prefix[:1]) as api:
                    facts = await self._facts(api, prefix[:1])
            except ApiError:
                continue
            found.add(prefix[:1])
            found.update((prefix[0], f["subject_id"]) for f in facts if f["subject_id"])
        names = sorted(n for n in found if all(n[:len(p)] == p[:len(n)] for p in prefixes))
        if op.max_depth is not None:
            names = sorted({n[:op.max_depth] for n in names})
        return names[op.offset:op.offset + op.limit]

    async def turn_context(self, user_id: str, conversation_id: str, query: str | None = None,
                           budget_tokens: int = 500) -> str:
        """What to prepend at the start of a turn: the conversation's summary, relevant memories and
        the active topic, as text for a system message."""
        async with self._api((user_id,)) as api:
            body = await api.context(conversation_id, query=query, budget_tokens=budget_tokens)
        parts = []
        if body.get("summary"):
            parts.append(f"Summary of the conversation so far:\n{body['summary']['text']}")
        memories = (body.get("retrieved") or {}).get("text")
        if memories:
            parts.append(f"Relevant memories:\n{memories}")
        topic = body.get("active_topic")
        if topic:
            parts.append(f"Current topic: {' - '.join(p for p in (topic.get('title'), topic.get('summary')) if p)}")
        return "\n\n".join(parts)


def key_of(fact: dict) -> str:
    """The item key a memory was stored under, or its memory id (one the service extracted)."""
    return next((t[len(KEY_TAG):] for t in fact.get("tags") or [] if t.startswith(KEY_TAG)), fact["fact_id"])


def content_of(value: dict[str, Any]) -> str:
    """The memory's text: value["content"] (or "text"), else the value as JSON."""
    text = value.get("content", value.get("text"))
    return str(text) if text is not None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def item_of(fact: dict, namespace: tuple[str, ...]) -> Item:
    updated = _time(fact["updated_at"])
    return Item(value=_value(fact), key=key_of(fact), namespace=namespace,
                created_at=_time(fact.get("created_at")) or updated, updated_at=updated)


def search_item(fact: dict, namespace: tuple[str, ...], score: float | None) -> SearchItem:
    item = item_of(fact, namespace)
    return SearchItem(namespace, item.key, item.value, item.created_at, item.updated_at, score)


def _value(fact: dict) -> dict[str, Any]:
    value = {"content": fact["content"], "category": fact["category"], "importance": fact["importance"],
             "memory_id": fact["fact_id"], "tags": [t for t in fact.get("tags") or [] if not t.startswith(KEY_TAG)]}
    if not fact.get("mine", True):
        value["shared_by"] = fact.get("owner_user_id")
    return value


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _matches(value: dict[str, Any], wanted: dict[str, Any] | None) -> bool:
    return all(value.get(k) == v for k, v in (wanted or {}).items())

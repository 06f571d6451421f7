"""LLM results cached in PostgreSQL by (model, prompt version, input hash), shared by generations;
each entry's provenance in public.llm_cache_sources (core/llm/provenance.py)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from psycopg.types.json import Jsonb, set_json_loads
from psycopg_pool import AsyncConnectionPool

from core.llm import provenance
from core.llm.port import ChatMessage, JsonOutput, SummaryCall, SummaryOutput

log = logging.getLogger(__name__)


async def _orjson_loads(conn) -> None:
    """Cached answers come back as jsonb: parse them with orjson (a wave reads thousands)."""
    set_json_loads(orjson.loads, conn)


def cache_key(kind: str, model: str, prompt_version: str, inputs: Any) -> str:
    """sha256 over a canonical JSON of everything the answer depends on."""
    canonical = orjson.dumps(
        {"kind": kind, "model": model, "prompt_version": prompt_version, "inputs": inputs},
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(canonical).hexdigest()


_PUT = ("INSERT INTO public.llm_cache (cache_key, kind, model, prompt_version, output)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (cache_key) DO NOTHING")


class LlmCache:
    """Lookups and stores in public.llm_cache; hits and calls counted per generation.

    The counts are kept in memory and added to public.llm_cache_usage every
    `flush_interval_s` (and by `flush`/`aclose`): one row per generation and kind would
    otherwise be updated, and committed, by every concurrent lookup. A killed worker loses
    at most the last interval's counts (the cache entries themselves are written at once).
    """

    def __init__(self, dsn: str, topic_prefix: str, generation: str, *, flush_interval_s: float = 0.5) -> None:
        self.dsn, self.topic_prefix, self.generation = dsn, topic_prefix, generation
        self.flush_interval_s = flush_interval_s
        self._pool: AsyncConnectionPool | None = None
        self._counts: dict[str, list[int]] = {}  # kind -> [hits, calls] not yet flushed
        self._flusher: asyncio.Task | None = None

    async def _connection(self):
        if self._pool is None:
            # Autocommit: every method is one statement (a hit's provenance a second one, additive),
            # so a transaction's BEGIN and COMMIT would be two more round trips a call for nothing.
            self._pool = AsyncConnectionPool(self.dsn, min_size=0, max_size=4, open=False, configure=_orjson_loads,
                                             kwargs={"autocommit": True})
            await self._pool.open()
        return self._pool.connection()

    async def get(self, key: str, kind: str) -> Any | None:
        async with await self._connection() as conn:
            row = await (await conn.execute("SELECT output FROM public.llm_cache WHERE cache_key = %s", (key,))).fetchone()
            if row is not None:
                await provenance.record(conn, [key])  # served to another request: its source too
        if row is not None:
            self._count(kind, hits=1)
        return row[0] if row else None

    async def get_many(self, keys: list[str], kind: str) -> dict[str, Any]:
        """Outputs of the keys found, in one query (a batch replay asks for a wave at once)."""
        async with await self._connection() as conn:
            cur = await conn.execute("SELECT cache_key, output FROM public.llm_cache WHERE cache_key = ANY(%s)", (keys,))
            found = dict(await cur.fetchall())
            await provenance.record(conn, list(found))
        if found:
            self._count(kind, hits=len(found))
        return found

    async def put(self, key: str, kind: str, model: str, prompt_version: str, output: Any) -> None:
        """The entry and its provenance (the conversations this stage was answering) in one
        statement: both or neither, as one round trip."""
        entry = (key, kind, model, prompt_version, Jsonb(output))
        sources = provenance.recording([key])
        async with await self._connection() as conn:
            if sources is None:
                await conn.execute(_PUT, entry)
            else:
                await conn.execute(f"WITH entry AS ({_PUT}) {sources[0]}", (*entry, *sources[1]))
        self._count(kind, calls=1)

    async def forget(self, key: str) -> None:
        async with await self._connection() as conn:
            await conn.execute("DELETE FROM public.llm_cache WHERE cache_key = %s", (key,))

    def _count(self, kind: str, hits: int = 0, calls: int = 0) -> None:
        counts = self._counts.setdefault(kind, [0, 0])
        counts[0] += hits
        counts[1] += calls
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon(), name="llm-cache-usage-flush")

    async def _flush_soon(self) -> None:
        await asyncio.sleep(self.flush_interval_s)
        await self.flush()

    async def flush(self) -> None:
        """Add the counts gathered so far to public.llm_cache_usage."""
        pending, self._counts = self._counts, {}
        if not pending:
            return
        try:
            async with await self._connection() as conn:  # every kind in one statement: all or none counted
                await conn.execute(
                    "INSERT INTO public.llm_cache_usage (topic_prefix, generation, kind, hits, calls)"
                    " SELECT %s, %s, k, h, c FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS u(k, h, c)"
                    " ON CONFLICT (topic_prefix, generation, kind) DO UPDATE SET"
                    " hits = llm_cache_usage.hits + EXCLUDED.hits, calls = llm_cache_usage.calls + EXCLUDED.calls",
                    (self.topic_prefix, self.generation, list(pending), [h for h, _ in pending.values()],
                     [c for _, c in pending.values()]),
                )
        except BaseException as error:  # a failure, or a flush cancelled mid-write by aclose
            for kind, (hits, calls) in pending.items():  # kept for the next flush
                counts = self._counts.setdefault(kind, [0, 0])
                counts[0] += hits
                counts[1] += calls
            if isinstance(error, Exception) and (self._flusher is None or self._flusher.done()):
                self._flusher = asyncio.create_task(self._flush_soon(), name="llm-cache-usage-flush")
            raise

    async def aclose(self) -> None:
        """Flush what was counted (a flush cut off by the cancel keeps its counts for this one)."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None and not flusher.done():
            flusher.cancel()
            try:
                await flusher
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001 - its counts were kept; the flush below retries them
                pass
        await self.flush()
        if self._pool is not None:
            await self._pool.close()


class CachedSummarizer:
    """A Summarizer that asks the cache first; same model, prompt and inputs -> same summary."""

    def __init__(self, inner, cache: LlmCache) -> None:
        self.inner, self.cache = inner, cache

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def prompt_version(self) -> str:
        return self.inner.prompt_version

    def _key(self, previous_summary: str | None, new_messages: list[ChatMessage], window_start_seq: int,
             window_end_seq: int) -> str:
        inputs = {
            "previous": previous_summary,
            "messages": [[m.seq, m.role, m.content] for m in new_messages],
            "window": [window_start_seq, window_end_seq],
        }
        return cache_key("summary", self.model, self.prompt_version, inputs)

    async def cached_many(self, calls: list[SummaryCall]) -> list[SummaryOutput | None]:
        """The cached answers of many calls with one lookup; None where not cached."""
        keys = [self._key(c.previous_summary, c.new_messages, c.window_start_seq, c.window_end_seq) for c in calls]
        found = await self.cache.get_many(keys, "summary") if keys else {}
        return [_summary(found[key]) if key in found else None for key in keys]

    async def summarize_window(
        self, previous_summary: str | None, new_messages: list[ChatMessage], window_start_seq: int, window_end_seq: int
    ) -> SummaryOutput:
        key = self._key(previous_summary, new_messages, window_start_seq, window_end_seq)
        cached = await self.cache.get(key, "summary")
        if cached is not None:
            return _summary(cached)
        output = await self.inner.summarize_window(previous_summary, new_messages, window_start_seq, window_end_seq)
        await self.cache.put(key, "summary", self.model, self.prompt_version, {
            "text": output.text, "model": output.model, "prompt_version": output.prompt_version,
        })
        return output

    async def aclose(self) -> None:
        await self.inner.aclose()
        await self.cache.aclose()


def _summary(cached: dict) -> SummaryOutput:
    return SummaryOutput(text=cached["text"], model=cached["model"], prompt_version=cached["prompt_version"])


class CachedJsonCompleter:
    """A JsonCompleter that asks the cache first (chunk + facts extraction, gates, topic summaries)."""

    def __init__(self, inner, cache: LlmCache) -> None:
        self.inner, self.cache = inner, cache

    @property
    def model(self) -> str:
        return self.inner.model

    def __getattr__(self, name: str) -> Any:  # other provider methods pass through uncached
        return getattr(self.inner, name)

    async def complete_json(
        self,
        prompt_version: str,
        variables: Mapping[str, object],
        *,
        model: str | None = None,
        validate: Callable[[dict], object] | None = None,
    ) -> JsonOutput:
        """Only answers the caller's `validate` accepts are stored (or served) from the cache,
        so a malformed answer is asked again on retry instead of being replayed forever."""
        used_model = model or self.inner.model
        key = cache_key("json", used_model, prompt_version, dict(variables))
        cached = await self.cache.get(key, "json")
        if cached is not None:
            try:
                if validate is not None:
                    validate(cached["data"])
                return JsonOutput(data=cached["data"], model=cached["model"], prompt_version=cached["prompt_version"])
            except Exception:  # noqa: BLE001 - an entry the caller now rejects is dropped
                await self.cache.forget(key)
        output = await self.inner.complete_json(prompt_version, variables, model=model, validate=validate)
        await self.cache.put(key, "json", used_model, prompt_version, {
            "data": output.data, "model": output.model, "prompt_version": output.prompt_version,
        })
        return output

    async def aclose(self) -> None:
        await self.inner.aclose()
        await self.cache.aclose()

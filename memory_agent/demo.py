"""`memory-agent demo`: append a sample conversation, wait until every memory system has
worked on it, and print what each produced plus a turn-start context.

The sample (memory_agent/data/sample_conversation.json) is four dated sessions on four
subjects; its dates are moved so that the last session was yesterday. Waiting is polling
with a deadline and a progress line per system, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources

import httpx
import psycopg

from runtime.client import MemoryClient
from memory_agent.demo_render import render_report
from memory_agent.ingest import derived_event_id, stored_event_ids
from core.settings import Settings

DEMO_USER = "demo-user"
# The next user message of the demo: the turn whose context is printed at the end.
DEMO_QUERY = "Remind me which database we chose for the bookshop API and when my deadline is."
Say = Callable[[str], None]


def sample_rounds() -> list[tuple[str, str]]:
    """(user, assistant) pairs of the sample conversation shipped with the package."""
    return [(r["user"], r["assistant"]) for r in _load()]


def _load() -> list[dict]:
    text = resources.files("memory_agent.data").joinpath("sample_conversation.json").read_text()
    return json.loads(text)


def sample_messages(now: datetime) -> list[dict]:
    """The sample as messages (seq, role, content, occurred_at), dated so the last was a day ago."""
    rounds = _load()
    times = [datetime.fromisoformat(r["at"]) for r in rounds]
    shift = (now - timedelta(days=1)) - times[-1]
    messages, session = [], 0
    for i, (r, at) in enumerate(zip(rounds, times)):
        if i and at - times[i - 1] > timedelta(hours=6):  # a new session starts after a long pause
            session += 1
        for offset, role in ((0, "user"), (40, "assistant")):
            when = at + shift + timedelta(seconds=offset)
            messages.append({"seq": len(messages), "role": role, "content": r[role], "occurred_at": when,
                             "session": session})
    return messages


def sessions(messages: list[dict]) -> list[list[dict]]:
    grouped: dict[int, list[dict]] = {}
    for m in messages:
        grouped.setdefault(m["session"], []).append(m)
    return list(grouped.values())


def summary_trigger(session: list[dict], summarize_after_seq: int) -> int | None:
    """The seq whose arrival asks for this session's first summary (seed 000: a round's end)."""
    return next((m["seq"] for m in session if m["role"] == "assistant" and m["seq"] >= summarize_after_seq), None)


def expected_chunks(messages: int, threshold: int, batch: int) -> int:
    """Seed 003: a batch is cut while more than `threshold` messages are unsummarized."""
    end, chunks = 0, 0
    while messages - end > threshold:
        end, chunks = end + batch, chunks + 1
    return chunks


async def append_sample(settings: Settings, tenant: str, conversation: str, messages: list[dict],
                        between_sessions: Callable[[list[dict]], Awaitable[None]] | None = None) -> tuple[int, int]:
    """Send the messages not yet stored, one session at a time, calling `between_sessions`
    after each; (sent, already there). Re-running the demo sends nothing."""
    sent = already = 0
    async with MemoryClient(settings) as client:
        for session in sessions(messages):
            envelopes = [client.message_event(
                tenant_id=tenant, conversation_id=conversation, user_id=DEMO_USER, seq=m["seq"], role=m["role"],
                content=m["content"], occurred_at=m["occurred_at"],
                event_id=derived_event_id(tenant, conversation, m["seq"], m["role"], m["content"]),
            ) for m in session]
            try:
                stored = await asyncio.to_thread(stored_event_ids, settings, envelopes)
            except psycopg.Error:
                stored = {}
            new = [e for e in envelopes if (e.tenant_id, e.conversation_id, e.seq) not in stored]
            for envelope in new:  # sequentially: the producer keeps the order per partition
                await client.append(envelope)
            sent, already = sent + len(new), already + len(envelopes) - len(new)
            if new and between_sessions is not None:
                await between_sessions(session)
    return sent, already


@dataclass
class Check:
    name: str
    probe: Callable[[], Awaitable[tuple[bool, str]]]
    after_the_others: bool = False  # probing it changes state (retrieval records what it surfaced)
    done: bool = False
    detail: str = "not checked yet"
    seconds: float = 0.0


@dataclass
class Observed:
    """What the systems produced, as the API and the read model show it."""

    summaries: list[dict] = field(default_factory=list)
    chunks: list[dict] = field(default_factory=list)
    facts: list[dict] = field(default_factory=list)
    topics: dict = field(default_factory=dict)
    context: dict = field(default_factory=dict)


class DemoProbe:
    """One probe per memory system; each fills `observed` and says whether it is done."""

    def __init__(self, settings: Settings, http: httpx.AsyncClient, tenant: str, conversation: str, last_seq: int):
        self.settings, self.http, self.tenant, self.conversation = settings, http, tenant, conversation
        self.last_seq = last_seq
        facts = settings.facts
        self.chunks_wanted = expected_chunks(last_seq + 1, facts.summarization_threshold, facts.batch_size)
        self.observed = Observed()

    async def _rows(self, sql: str) -> list[dict]:
        async with await psycopg.AsyncConnection.connect(
            self.settings.postgres.dsn, options=f"-c search_path={self.settings.pg_schema},public"
        ) as conn:
            cur = await conn.execute(sql, (self.tenant, self.conversation))
            names = [d.name for d in cur.description]
            return [dict(zip(names, row)) for row in await cur.fetchall()]

    async def messages(self) -> tuple[bool, str]:
        r = await self.http.get(f"/v1/conversations/{self.conversation}/messages", params={"limit": 1})
        if r.status_code == 404:
            return False, "no message projected yet"
        r.raise_for_status()
        last = r.json()["last_seq"]
        return last >= self.last_seq, f"projected up to seq {last} of {self.last_seq}"

    async def summaries(self) -> tuple[bool, str]:
        rows = self.observed.summaries = await self._rows(
            "SELECT memory_id, start_sequence, end_sequence, base_memory_id, status, model, prompt_version,"
            " memory_text FROM memory WHERE tenant_id = %s AND conversation_id = %s ORDER BY memory_id")
        completed = [r for r in rows if r["status"] == "completed"]
        busy = sum(r["status"] == "processing" for r in rows)
        newest = max((r["end_sequence"] for r in completed), default=-1)
        # Done when nothing is in flight and the newest summary leaves at most a window verbatim.
        done = bool(completed) and not busy and newest >= self.last_seq - self.settings.window.window_size
        return done, f"{len(completed)} completed, {busy} in progress, newest covers up to seq {newest}"

    async def facts(self) -> tuple[bool, str]:
        self.observed.chunks = await self._rows(
            "SELECT message_range_start, message_range_end, content, model FROM conversation_chunks"
            " WHERE tenant_id = %s AND conversation_id = %s ORDER BY message_range_start")
        r = await self.http.get("/v1/facts", headers={"X-User-Id": DEMO_USER})
        r.raise_for_status()
        self.observed.facts = [f for f in r.json()["facts"] if f.get("source_conversation_id") == self.conversation]
        chunks, facts = len(self.observed.chunks), len(self.observed.facts)
        return chunks >= self.chunks_wanted and facts > 0, f"{chunks}/{self.chunks_wanted} chunks, {facts} facts"

    async def topics(self) -> tuple[bool, str]:
        r = await self.http.get(f"/v1/conversations/{self.conversation}/topics")
        if r.status_code == 404:
            return False, "conversation not projected yet"
        r.raise_for_status()
        self.observed.topics = body = r.json()
        done = body["as_of_seq"] >= self.last_seq and body["active_topic_id"] is not None
        return done, f"{len(body['topics'])} topic(s), messages placed up to seq {body['as_of_seq']}"

    async def context(self) -> tuple[bool, str]:
        r = await self.http.get(f"/v1/conversations/{self.conversation}/context", params={
            "query": DEMO_QUERY, "min_seq": self.last_seq, "wait_ms": 2000})
        r.raise_for_status()
        self.observed.context = body = r.json()
        retrieved = body.get("retrieved") or {}
        items = retrieved.get("items") or []
        # A second run asks at the same turn: a retried turn gets the same memories (items shown
        # at an EARLIER turn give way to new ones, and are listed as already_surfaced when they
        # no longer fit: docs/retrieval.md).
        surfaced = [e for e in retrieved.get("excluded") or [] if e.get("reason") == "already_surfaced"]
        done = bool(items or surfaced) and body.get("active_topic") is not None and body["watermark"]["complete"]
        return done, (f"{len(items)} retrieved item(s), {len(surfaced)} surfaced before,"
                      f" active topic: {'yes' if body.get('active_topic') else 'no'}")

    def checks(self) -> list[Check]:
        return [Check("messages", self.messages), Check("summary chain", self.summaries),
                Check("chunks + facts", self.facts), Check("topics", self.topics),
                Check("turn-start context", self.context, after_the_others=True)]

    async def session_summarized(self, session: list[dict], deadline: float, say: Say) -> None:
        """Wait (until `deadline`) for the summary a session's first round asks for, as a live
        chat gives the summarizer time between sessions; a burst gets one summary per burst."""
        trigger = summary_trigger(session, self.settings.window.summarize_after_seq)
        begin = time.monotonic()
        label = f"session {session[0]['session'] + 1} ({session[0]['occurred_at']:%a %d %b}, {len(session)} messages)"
        if trigger is None or "window" not in self.settings.systems:
            say(f"  {label} appended")
            return
        last_report = begin
        while time.monotonic() < deadline:
            if time.monotonic() - last_report >= 10.0:
                last_report = time.monotonic()
                say(f"  {label} appended; waiting {last_report - begin:.0f}s for the summary up to seq {trigger}...")
            try:
                await self.summaries()
            except psycopg.Error:
                pass
            done = [r for r in self.observed.summaries if r["status"] == "completed" and r["end_sequence"] >= trigger]
            if done:
                r = done[0]
                say(f"  {label} appended; summary #{r['memory_id']} of seq {r['start_sequence']}-{r['end_sequence']}"
                    f" after {time.monotonic() - begin:.1f}s")
                return
            await asyncio.sleep(0.3)
        say(f"  {label} appended; no summary reached seq {trigger} in time")


async def wait_for_systems(checks: list[Check], timeout: float, say: Say, every: float = 10.0) -> bool:
    """Poll every check until all are done or `timeout` passes; a line when one is done and
    a line every `every` seconds naming what is still pending. True if all are done."""
    begin = last_report = time.monotonic()
    while True:
        for check in (c for c in checks if not c.done):
            if check.after_the_others and any(not c.done for c in checks if c is not check):
                check.detail = "probed once the others are ready"
                continue
            try:
                check.done, check.detail = await check.probe()
            except (httpx.HTTPError, psycopg.Error) as exc:
                check.detail = f"not readable yet ({type(exc).__name__})"
            if check.done:
                check.seconds = time.monotonic() - begin
                say(f"  ready after {check.seconds:5.1f}s  {check.name}: {check.detail}")
        pending = [c for c in checks if not c.done]
        if not pending:
            return True
        now = time.monotonic()
        if now - begin >= timeout:
            return False
        if now - last_report >= every:
            last_report = now
            say(f"  waiting {now - begin:5.0f}s   " + "; ".join(f"{c.name}: {c.detail}" for c in pending))
        await asyncio.sleep(0.5)


async def run_demo(settings: Settings, api_url: str, conversation_id: str, *, timeout: float = 600.0,
                   say: Say = print) -> bool:
    """Append the sample, wait for every system, print the report. False if something timed out."""
    api_key, tenant = next((key, grant.tenant) for key, grant in settings.api.grants().items())
    messages = sample_messages(datetime.now(UTC))
    deadline = time.monotonic() + timeout
    say(f"sample conversation {tenant}/{conversation_id}: {len(messages)} messages in {len(sessions(messages))}"
        f" sessions ({messages[0]['occurred_at']:%a %d %b} - {messages[-1]['occurred_at']:%a %d %b});"
        f" waiting up to {timeout:.0f}s in all (the worker log says what it does)")
    async with httpx.AsyncClient(base_url=api_url, headers={"X-API-Key": api_key}, timeout=30) as http:
        probe = DemoProbe(settings, http, tenant, conversation_id, messages[-1]["seq"])
        sent, already = await append_sample(settings, tenant, conversation_id, messages,
                                            lambda session: probe.session_summarized(session, deadline, say))
        say(f"appended {sent}, {already} already in the log; waiting for the memory systems:")
        checks = probe.checks()
        complete = await wait_for_systems(checks, max(1.0, deadline - time.monotonic()), say)
    if not complete:
        say("TIMED OUT waiting for: " + "; ".join(f"{c.name} ({c.detail})" for c in checks if not c.done)
            + ". Is the worker running? Showing what there is.")
    say(render_report(probe.observed, DEMO_QUERY, api_url, conversation_id, api_key))
    return complete

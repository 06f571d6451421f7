"""Re-derivation after an erasure (docs/lineage.md, "Mixed rows"): the sender of re-derive requests.

When an erased user wrote in another owner's conversation, the erasure projector deletes the
summaries and chunks that mixed the user's words with others' and writes a row in
`erasure_rederive` in the same transaction. This timer turns each committed row into requests
on the normal paths, keyed by the conversation (so they reach the partition of its folds):

- one `conversation.rederive.requested` for the window fold (and the topic fold, which derives
  the conversation's topics again: docs/lineage.md), ordered, concurrency 1; the window fold
  asks the summary stage for a summary from the newest summary kept up to where the newest one
  had reached, and retries it like any other request;
- a `chunk.requested` for each deleted chunk range that still has messages, to the chunk
  stage (its result is projected; the chunk fold ignores a range behind it). This sender
  re-sends the ranges not recorded again after `facts.request_timeout_s`, up to
  `facts.max_attempts` times, then gives up and says so in the row's `outcome`.

Requests are sent, acknowledged, then the row is updated: a crash in between sends them again,
and every path is idempotent (the fold remembers the erasure it re-derived for; the chunk stage
skips a range already recorded). Rows are taken FOR UPDATE SKIP LOCKED, so two workers never
send one row at the same time. Only committed rows are read: the messages the requests read
are those left after the erasure."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import faust

from runtime.outage import is_transient
from schemas import erasure_events as ee
from schemas import facts_events as fe
from schemas.codec import encode, new_event
from streams.context import StreamContext
from streams.facts.agent import prompt_and_model

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
_PENDING = """
SELECT erasure_event_id, tenant_id, conversation_id, erased_seqs, base_memory_id, base_end_seq, chunk_ranges,
       attempts, sent_at
  FROM erasure_rederive WHERE done_at IS NULL ORDER BY created_at LIMIT 50 FOR UPDATE SKIP LOCKED
"""


@dataclass(frozen=True)
class Plan:
    summary: bool  # send the window and topic folds their re-derive request
    chunks: tuple[tuple[int, int], ...]  # chunk ranges to request (again)
    done: str | None  # the row's outcome when nothing is left to do
    sent: bool  # the row's attempts and sent_at move on


def plan(*, attempts: int, sent_at: datetime | None, now: datetime, ranges: list[tuple[int, int]],
         recorded: set[tuple[int, int]], with_messages: set[tuple[int, int]], window: bool, facts: bool,
         resend_after_s: float, max_attempts: int) -> Plan:
    """What to send for one row (pure). A range left without any message has nothing to derive."""
    first = sent_at is None
    missing = tuple(r for r in ranges if r not in recorded and r in with_messages) if facts else ()
    if not missing:
        return Plan(window and first, (), "done", first)
    if not first and now - sent_at < timedelta(seconds=resend_after_s):
        return Plan(False, (), None, False)
    if attempts >= max_attempts:
        return Plan(False, (), f"gave up: chunks {[list(r) for r in missing]} after {attempts} attempts", False)
    return Plan(window and first, missing, None, True)


def register(app: faust.App, ctx: StreamContext) -> None:
    settings = ctx.settings
    # The request goes to every fold that derives a mixed conversation again from the log: the
    # window's summaries and the topics (a deployment with topics only needs it too).
    window = bool({"window", "topics"} & set(settings.systems))
    facts = "facts" in settings.systems
    prompt_version, model = prompt_and_model(settings)

    @app.timer(interval=INTERVAL_S)
    async def send_rederive_requests() -> None:
        try:
            pool = await ctx.pool()
            async with pool.connection() as conn, conn.transaction():
                for row in await (await conn.execute(_PENDING)).fetchall():
                    await _one(conn, row)
        except Exception as exc:  # noqa: BLE001 - the next tick tries again; a bug is logged loudly
            if is_transient(exc):
                log.warning("re-derive requests not sent (%s); retrying at the next tick", exc)
            else:
                log.exception("re-derive requests not sent")

    async def _one(conn, row) -> None:
        erasure, tenant, conversation, erased, base_id, base_end, ranges, attempts, sent_at = row
        ranges = [tuple(r) for r in ranges]
        recorded = set(await (await conn.execute(
            "SELECT message_range_start, message_range_end FROM conversation_chunks WHERE tenant_id = %s"
            " AND conversation_id = %s", (tenant, conversation))).fetchall())
        with_messages = {r for r in ranges if await (await conn.execute(
            "SELECT 1 FROM messages WHERE tenant_id = %s AND conversation_id = %s AND seq >= %s AND seq < %s LIMIT 1",
            (tenant, conversation, r[0], r[1]))).fetchone()}
        now = (await (await conn.execute("SELECT now()")).fetchone())[0]
        todo = plan(attempts=attempts, sent_at=sent_at, now=now, ranges=ranges, recorded=recorded,
                    with_messages=with_messages, window=window, facts=facts,
                    resend_after_s=settings.facts.request_timeout_s, max_attempts=settings.facts.max_attempts)
        common = dict(tenant_id=tenant, conversation_id=conversation, user_id="system")
        envelopes = []
        if todo.summary:
            envelopes.append(new_event(ee.REDERIVE_REQUESTED, ee.RederiveRequested(
                erasure_event_id=erasure, first_seq=min(erased), erased_seqs=sorted(erased),
                base_memory_id=base_id, base_end_seq=base_end), **common))
        for start, end in todo.chunks:
            envelopes.append(new_event(fe.CHUNK_REQUESTED, fe.ChunkRequested(
                start_seq=start, end_seq_exclusive=end, attempt=attempts + 1, prompt_version=prompt_version,
                model=model), **common))
        for envelope in envelopes:  # acknowledged before the row moves on
            await (await ctx.memory_events.send(key=envelope.key, value=encode(envelope)))
        if todo.sent:
            await conn.execute("UPDATE erasure_rederive SET attempts = attempts + 1, sent_at = now()"
                               " WHERE erasure_event_id = %s AND conversation_id = %s", (erasure, conversation))
        if todo.done:
            await conn.execute("UPDATE erasure_rederive SET done_at = now(), outcome = %s"
                               " WHERE erasure_event_id = %s AND conversation_id = %s", (todo.done, erasure, conversation))
        if envelopes or todo.done:
            log.info("re-derive after erasure %s in %s/%s: %d request(s)%s", erasure, tenant, conversation,
                     len(envelopes), f", {todo.done}" if todo.done else "")

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import faust

from domain.erasure_reads import PendingRederive, RederiveSession
from runtime.outage import is_transient
from schemas import erasure_events as ee
from schemas import facts_events as fe
from schemas.codec import encode, new_event
from schemas.envelope import Envelope
from streams.context import StreamContext
from streams.facts.agent import prompt_and_model

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
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


@dataclass(frozen=True)
class Sender:
    """What the sender asks for (from the settings) and how it sends an event (acknowledged)."""

    send: Callable[[Envelope], Awaitable[None]]
    window: bool  # the window or topic fold derives a mixed conversation again
    facts: bool
    prompt_version: str
    model: str
    resend_after_s: float
    max_attempts: int


async def send_row(session: RederiveSession, row: PendingRederive, sender: Sender) -> None:
    """One pending row: its requests sent (each acknowledged), then the row marked in the session."""
    tenant, conversation = row.tenant_id, row.conversation_id
    ranges = [tuple(r) for r in row.chunk_ranges]
    recorded = await session.recorded_ranges(tenant, conversation)
    with_messages = await session.with_messages(tenant, conversation, ranges)
    todo = plan(attempts=row.attempts, sent_at=row.sent_at, now=await session.now(), ranges=ranges,
                recorded=recorded, with_messages=with_messages, window=sender.window, facts=sender.facts,
                resend_after_s=sender.resend_after_s, max_attempts=sender.max_attempts)
    common = dict(tenant_id=tenant, conversation_id=conversation, user_id="system")
    envelopes = []
    if todo.summary:
        envelopes.append(new_event(ee.REDERIVE_REQUESTED, ee.RederiveRequested(
            erasure_event_id=row.erasure_event_id, first_seq=min(row.erased_seqs), erased_seqs=sorted(row.erased_seqs),
            base_memory_id=row.base_memory_id, base_end_seq=row.base_end_seq), **common))
    for start, end in todo.chunks:
        envelopes.append(new_event(fe.CHUNK_REQUESTED, fe.ChunkRequested(
            start_seq=start, end_seq_exclusive=end, attempt=row.attempts + 1, prompt_version=sender.prompt_version,
            model=sender.model), **common))
    for envelope in envelopes:  # acknowledged before the row moves on
        await sender.send(envelope)
    if todo.sent:
        await session.sent(row.erasure_event_id, conversation)
    if todo.done:
        await session.done(row.erasure_event_id, conversation, todo.done)
    if envelopes or todo.done:
        log.info("re-derive after erasure %s in %s/%s: %d request(s)%s", row.erasure_event_id, tenant, conversation,
                 len(envelopes), f", {todo.done}" if todo.done else "")


def register(app: faust.App, ctx: StreamContext) -> None:
    settings = ctx.settings
    prompt_version, model = prompt_and_model(settings)

    async def send(envelope: Envelope) -> None:
        await (await ctx.memory_events.send(key=envelope.key, value=encode(envelope)))

    # The request goes to every fold that derives a mixed conversation again from the log: the
    # window's summaries and the topics (a deployment with topics only needs it too).
    sender = Sender(send, window=bool({"window", "topics"} & set(settings.systems)), facts="facts" in settings.systems,
                    prompt_version=prompt_version, model=model, resend_after_s=settings.facts.request_timeout_s,
                    max_attempts=settings.facts.max_attempts)

    @app.timer(interval=INTERVAL_S)
    async def send_rederive_requests() -> None:
        try:
            reads = await ctx.reads("rederive_reads")  # domain/erasure_reads.py; projections/erasure_reads.py
            async with reads.session() as session:
                for row in await session.pending():
                    await send_row(session, row, sender)
        except Exception as exc:  # noqa: BLE001 - the next tick tries again; a bug is logged loudly
            if is_transient(exc):
                log.warning("re-derive requests not sent (%s); retrying at the next tick", exc)
            else:
                log.exception("re-derive requests not sent")

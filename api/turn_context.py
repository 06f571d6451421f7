"""Gathers the rows a turn-start context needs and assembles the response (seed 000/002 read side)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from core import telemetry
from api.schemas import ContextMessage, ContextOut, SummaryOut, Watermark
from retrieval.items import PREPARE_SQL, Prepared, one_query, prepare_params, prepared_from
from retrieval.request import ContextRequest
from retrieval.search import column_names
from retrieval.service import TURN_SQL, RetrievalConfig, embedder_for, prepare_plan, query_text, turn_params
from api.sections.retrieval import retrieval_section
from api.sections.topic import (AHEAD_MESSAGES_SQL, AHEAD_TOPIC_SQL, PLACED_SQL, TopicAhead, ahead_params,
                                placed_params, topic_section)
from projections import queries
from projections.as_of_queries import CLOCK_SQL, clock, clock_from
from streams.window.context import MemoryRow, Message, assemble_context

MEMORY_ROWS = 20  # the conversation's newest memory rows the summary is chosen from

# The gap's messages: the newest `limit` after the newest completed summary among the
# conversation's MEMORY_ROWS newest memory rows (as build_turn_context picks it from them) and
# before the turn, with the `after` it used, so a summary completed between this statement and
# the memory listing's is noticed (the listing is then read again with the listing's `after`).
_GAP_SQL = (
    "SELECT a.after, m.seq, m.event_id, m.role, m.content, m.metadata, m.occurred_at FROM (SELECT COALESCE(("
    "SELECT max(r.end_sequence) FROM (SELECT end_sequence, status FROM memory WHERE tenant_id = %(tenant)s"
    " AND conversation_id = %(conversation)s ORDER BY memory_id DESC LIMIT %(memory_rows)s) r"
    " WHERE r.status = 'completed' AND (%(before)s::int IS NULL OR r.end_sequence < %(before)s::int)), -1) AS after) a"
    " LEFT JOIN LATERAL (SELECT seq, event_id, role, content, metadata, occurred_at FROM messages"
    " WHERE tenant_id = %(tenant)s AND conversation_id = %(conversation)s AND seq > a.after"
    " AND (%(before)s::int IS NULL OR seq < %(before)s::int) ORDER BY seq DESC LIMIT %(limit)s) m ON true"
    " ORDER BY m.seq NULLS FIRST"
)


@dataclass(frozen=True)
class TurnReads:
    """What a context reads before its sections search: the projection clock (when asked for),
    the conversation's newest memory rows, the gap's messages (seq order: the newest `limit`
    after `after`), and what the sections would read first if it was sent with them: the
    retrieval's prepare statement, the topic section's progress row, its active topic and that
    topic's messages (api.sections.topic.TopicAhead) and the retrieval's newest messages before
    the turn, (content, occurred_at) newest first (None: not sent)."""

    clock: tuple[str, int | None] | None
    memory: list[queries.MemoryRow]
    after: int
    messages: list[queries.MessageRow]
    prepared: Prepared | None = None
    placed: tuple | None = None
    recent: list[tuple[str, Any]] | None = None
    topic: TopicAhead | None = None


def after_of(memory: list[queries.MemoryRow], before_seq: int | None) -> int:
    """Only messages after the newest completed summary can be in the gap."""
    ends = [m.end_sequence for m in memory
            if m.status == "completed" and (before_seq is None or m.end_sequence < before_seq)]
    return max(ends, default=-1)


async def read_turn(conn: psycopg.AsyncConnection, request: ContextRequest, app_state: Any, *,
                    with_clock: bool = False) -> TurnReads:
    """The context's reads that need nothing but the conversation, in one round trip (one query
    string: retrieval.items.one_query): the clock, the memory rows, the gap's messages, and the sections' first
    statements (the retrieval's prepare when the request has a current message, the topic
    section's progress with the active topic and its messages, used when the fold is up to date:
    a round trip of the section's less; the retrieval's last messages before the turn: the gap does not always
    hold them, and a statement of their own cost a round trip more). On an idle connection in
    autocommit (the context route's) they open the transaction with a BEGIN of their own, sent with
    them: the connection stays in autocommit until that transaction ends (the search's COMMIT).
    If any of them fails, the transaction is rolled back, the connection leaves autocommit and they
    are read one by one, without the sections' (which then fail, or not, as they would alone)."""
    settings = app_state.settings
    config = RetrievalConfig.from_settings(settings.retrieval)
    plan = prepare_plan(request, config)
    topics = "topics" in settings.systems
    try:
        return (await _together(conn, request, settings.window.context_max_gap_messages + 1, with_clock, plan,
                                 config, topics))[1]
    except psycopg.Error:
        await conn.rollback()
        if conn.autocommit:
            await conn.set_autocommit(False)  # idle after the rollback: the statements below share a transaction
        memory = await queries.list_memory(conn, request.tenant_id, request.conversation.conversation_id,
                                           limit=MEMORY_ROWS)
        return await _with_messages(conn, request, settings.window.context_max_gap_messages + 1,
                                    await clock(conn) if with_clock else None, memory)


def _statements(request: ContextRequest, limit: int, with_clock: bool, plan, config: RetrievalConfig,
                topics: bool) -> list[tuple[str, Any]]:
    """The first reads' statements with their parameters (read_turn)."""
    tenant, conversation = request.tenant_id, request.conversation.conversation_id
    return [
        (queries.LIST_MEMORY_SQL, (tenant, conversation, MEMORY_ROWS)),
        (_GAP_SQL, {"tenant": tenant, "conversation": conversation, "before": request.before_seq, "limit": limit,
                    "memory_rows": MEMORY_ROWS}),
        *([(CLOCK_SQL, None)] if with_clock else []),
        *([(PREPARE_SQL, prepare_params(*plan))] if plan is not None else []),
        *([(PLACED_SQL, placed_params(request)), (AHEAD_TOPIC_SQL, ahead_params(request)),
           (AHEAD_MESSAGES_SQL, ahead_params(request))] if topics else []),
        (TURN_SQL, turn_params(request, config.last_messages)),
    ]


async def _together(conn: psycopg.AsyncConnection, request: ContextRequest, limit: int, with_clock: bool,
                    plan, config: RetrievalConfig, topics: bool, *, with_conversation: bool = False
                    ) -> tuple[queries.ConversationRow | None, TurnReads]:
    """The first reads in one round trip (after the conversation's row: `with_conversation`)."""
    tenant, conversation = request.tenant_id, request.conversation.conversation_id
    begin = conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    statements = [
        *([("BEGIN", None)] if begin else []),
        *([(queries.CONVERSATION_SQL, (tenant, conversation))] if with_conversation else []),
        *_statements(request, limit, with_clock, plan, config, topics),
    ]
    row = None
    async with conn.cursor() as cur:
        await cur.execute(one_query(conn, statements))  # one round trip; results in statement order
        if begin:
            cur.nextset()
        if with_conversation:
            found = await cur.fetchone()
            row = None if found is None else queries.ConversationRow(*found)
            cur.nextset()
        names = column_names(cur)
        memory = [queries.MemoryRow(**dict(zip(names, row))) for row in await cur.fetchall()]
        cur.nextset()
        gap = await cur.fetchall()
        read_clock = prepared = placed = topic = None
        if with_clock:
            cur.nextset()
            read_clock = clock_from(await cur.fetchone())
        if plan is not None:
            cur.nextset()
            prepared = prepared_from(await cur.fetchone(), config.keyword_max_terms, config.keyword_max_doc_fraction)
        if topics:
            cur.nextset()
            placed = tuple(await cur.fetchone())
            cur.nextset()
            topic_names, found = column_names(cur), await cur.fetchone()
            cur.nextset()
            topic = TopicAhead(topic_names, None if found is None else tuple(found), await cur.fetchall())
        cur.nextset()
        recent = [(content, occurred_at) for content, occurred_at in await cur.fetchall()]
    after = after_of(memory, request.before_seq)
    if gap[0][0] != after:  # a summary completed between the two statements: read as the listing says
        return row, await _with_messages(conn, request, limit, read_clock, memory, prepared, placed, recent, topic)
    messages = [queries.MessageRow(*values[1:]) for values in gap if values[1] is not None]
    return row, TurnReads(read_clock, memory, after, messages, prepared, placed, recent, topic)


async def read_conversation_and_turn(conn: psycopg.AsyncConnection, guess: ContextRequest, app_state: Any, *,
                                     with_clock: bool = False
                                     ) -> tuple[queries.ConversationRow | None, TurnReads | None]:
    """The conversation's row and, in the same round trip, the first reads (read_turn) of
    `guess`: the request as it will be if the conversation's user and subject are the ones
    guessed (the caller knows them from an earlier request). The caller checks the row (it may
    be missing, or the caller not allowed to see it) and keeps the reads only if the request it
    makes from the row would send the same statements (`same_reads`). (None, None) if a
    statement failed: the transaction is rolled back, and the caller reads as usual."""
    settings = app_state.settings
    config = RetrievalConfig.from_settings(settings.retrieval)
    try:
        return await _together(conn, guess, settings.window.context_max_gap_messages + 1, with_clock,
                               prepare_plan(guess, config), config, "topics" in settings.systems,
                               with_conversation=True)
    except psycopg.Error:
        await conn.rollback()
        return None, None


def same_reads(guess: ContextRequest, request: ContextRequest, app_state: Any, *, with_clock: bool = False) -> bool:
    """Whether `request`'s first reads are the statements `guess`'s were, parameter for parameter."""
    settings = app_state.settings
    config = RetrievalConfig.from_settings(settings.retrieval)
    limit, topics = settings.window.context_max_gap_messages + 1, "topics" in settings.systems
    return (_statements(guess, limit, with_clock, prepare_plan(guess, config), config, topics)
            == _statements(request, limit, with_clock, prepare_plan(request, config), config, topics))


async def _with_messages(conn: psycopg.AsyncConnection, request: ContextRequest, limit: int,
                         read_clock: tuple[str, int | None] | None, memory: list[queries.MemoryRow],
                         prepared: Prepared | None = None, placed: tuple | None = None,
                         recent: list[tuple[str, Any]] | None = None, topic: TopicAhead | None = None
                         ) -> TurnReads:
    after = after_of(memory, request.before_seq)
    messages = await queries.list_messages(conn, request.tenant_id, request.conversation.conversation_id,
                                           after_seq=after, before_seq=request.before_seq, limit=limit, newest=True)
    return TurnReads(read_clock, memory, after, messages, prepared, placed, recent, topic)


async def build_turn_context(
    conn: psycopg.AsyncConnection, request: ContextRequest, *, min_seq: int | None, app_state: Any
) -> ContextOut:
    return (await build_turn_context_clocked(conn, request, min_seq=min_seq, app_state=app_state))[0]


async def build_turn_context_clocked(
    conn: psycopg.AsyncConnection, request: ContextRequest, *, min_seq: int | None, app_state: Any,
    with_clock: bool = False, end_reads: bool = False, reads: TurnReads | None = None,
) -> tuple[ContextOut, tuple[str, int | None] | None]:
    """The context, and the projection clock read as the read began (`with_clock`; else None).
    `end_reads`: the transaction holds nothing but this context's reads, so the retrieval's
    search ends it (its COMMIT sent with the statement). `reads`: the first reads, if the caller
    made them already (read_conversation_and_turn; the current message's embedding started then)."""
    conversation, before_seq = request.conversation, request.before_seq
    tenant, conversation_id = conversation.tenant_id, conversation.conversation_id
    if reads is None:
        if request.query and request.query.strip():
            warm_query_embedding(app_state, request.query)  # on its thread while the reads travel
        reads = await read_turn(conn, request, app_state, with_clock=with_clock)
    memory, after, messages = reads.memory, reads.after, reads.messages
    rows = [
        MemoryRow(m.memory_id, m.start_sequence, m.end_sequence, m.base_memory_id, m.status, m.memory_text)
        for m in memory
    ]
    limits = app_state.settings.window
    # One more than the limit (read_turn): assemble_context then sees that older messages were left out.
    assembled = assemble_context(
        rows, [Message(m.seq, m.role, m.content) for m in messages], before_seq,
        max_messages=limits.context_max_gap_messages, max_bytes=limits.context_max_gap_bytes,
    )
    # The first gap seq returned verbatim (older ones are summarized or named as omitted).
    verbatim_from_seq = assembled.gap[0].seq if assembled.gap else None
    omitted = assembled.omitted
    omitted_count = await queries.count_messages(conn, tenant, conversation_id, *omitted) if omitted else 0

    expected_up_to = max(conversation.last_seq, min_seq if min_seq is not None else -1)
    if before_seq is not None:
        expected_up_to = min(expected_up_to, before_seq - 1)
    # The listing holds every message of the range unless it was cut at its limit: then the
    # missing seqs (and the retrieval's last turns) need no statement of their own.
    listed_all = len(messages) <= limits.context_max_gap_messages
    if expected_up_to <= after:
        missing = []
    elif listed_all:
        missing = queries.missing_in([m.seq for m in messages], expected_up_to, after_seq=after)
    else:
        missing = await queries.missing_seqs(conn, tenant, conversation_id, expected_up_to, after_seq=after)
    last_messages = app_state.settings.retrieval.last_messages
    recent = ([(m.content, m.occurred_at) for m in reversed(messages)]
              if after < 0 or len(messages) >= max(last_messages, 1) else reads.recent)
    by_id = {m.memory_id: m for m in memory}
    summary = None
    if assembled.summary is not None:
        row = by_id[assembled.summary.memory_id]
        summary = SummaryOut(
            memory_id=row.memory_id, start_seq=row.start_sequence, end_seq=row.end_sequence,
            text=row.memory_text or "", prompt_version=row.prompt_version, model=row.model,
        )
    occurred = {m.seq: m.occurred_at for m in messages}
    out = ContextOut(
        conversation_id=conversation_id,
        mode=assembled.mode,
        summary=summary,
        messages=[
            ContextMessage(seq=m.seq, role=m.role, content=m.content, occurred_at=occurred[m.seq])
            for m in assembled.gap
        ],
        watermark=Watermark(
            last_seq=conversation.last_seq,
            summary_end_seq=assembled.summary_end_seq,
            requested_min_seq=min_seq,
            complete=not missing,
            missing_seqs=missing,
            verbatim_from_seq=verbatim_from_seq,
            gap_omitted_from_seq=omitted[0] if omitted else None,
            gap_omitted_to_seq=omitted[1] if omitted else None,
            gap_omitted_count=omitted_count,
        ),
        retrieved=await telemetry.traced("context retrieval", retrieval_section(
            conn, request, app_state, verbatim_from_seq=min((m.seq for m in assembled.gap), default=None),
            recent=recent, prepared=reads.prepared, then_commit=end_reads)),
        # Without the topics system no fold places the message: waiting for it (the section's
        # `context_wait_ms`) would cost every context half a second for nothing.
        active_topic=await telemetry.traced("context topic", topic_section(conn, request, app_state,
                                                                           placed=reads.placed, ahead=reads.topic))
        if "topics" in app_state.settings.systems else None,
    )
    return out, reads.clock


def warm_query_embedding(app_state: Any, query: str) -> None:
    """Start embedding the current message now, on the embedder's thread, when the retrieval
    will embed it as it is (retrieval.service.query_vector: unless the earlier turns' weight is
    1 or more): its cache (retrieval/query_cache.py) hands the vector to the retrieval, or the
    embedding still running. Never raises: a failure is the retrieval's to report."""
    config = RetrievalConfig.from_settings(app_state.settings.retrieval)
    if config.context_weight >= 1:
        return
    current = query_text(query, (), config)
    if current is None:
        return
    task = asyncio.ensure_future(embedder_for(app_state).embed_query(current))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: never "never retrieved"

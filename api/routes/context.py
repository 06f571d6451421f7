"""The main call: what a chat service should prepend at the start of a turn."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from fastapi import APIRouter, Header, HTTPException, Path, Query, Request

from api.as_of import context_as_of
from api.auth import conversation_user
from api.deps import ConnDep, PrincipalDep, SettingsDep
from api.log_ends import LogEnds, projected_through
from api.schemas import ContextOut
from retrieval.request import ContextRequest
from api.served import recorder_for
from api.turn_context import (build_turn_context_clocked, read_conversation_and_turn, same_reads,
                              warm_query_embedding)
from core import telemetry
from core.metrics import CONTEXT_LATENCY
from projections import queries
from projections.queries import ConversationRow
from schemas.envelope import IDENTIFIER, conversation_key

router = APIRouter(prefix="/v1/conversations", tags=["context"])
MAX_SEQ = 2**31 - 1  # the seq column's range: nothing past it can exist
ConversationId = Path(pattern=IDENTIFIER, max_length=200, description="The conversation")
UserIdHeader = Header(None, alias="X-User-Id", pattern=IDENTIFIER, max_length=200,
                      description="The acting user (as ?user_id=), for a service key granted act_as any_user")


def named_in(header: str | None, query: str | None = None) -> str | None:
    """The user a request names with X-User-Id and/or ?user_id= (400 when they differ)."""
    if header and query and header != query:
        raise HTTPException(400, detail="X-User-Id and user_id name different users")
    return header or query


@router.get("/{conversation_id}/context", response_model=ContextOut)
async def turn_context(
    principal: PrincipalDep,
    conn: ConnDep,
    settings: SettingsDep,
    conversation_id: str = ConversationId,
    before_seq: int | None = Query(
        None, ge=0, le=MAX_SEQ, description="The current message's seq: it and anything after are left out"
    ),
    min_seq: int | None = Query(
        None, ge=0, le=MAX_SEQ, description="The caller has written up to this seq: wait briefly for the projection"
    ),
    wait_ms: int = Query(1000, ge=0, le=60_000, description="How long to wait for min_seq (capped by the server)"),
    query: str | None = Query(
        None, max_length=8000, description="The current message: retrieval finds facts and memories relevant to it"
    ),
    user_id: str | None = Query(None, pattern=IDENTIFIER, max_length=200,
                                description="Whose memory (default: the conversation's user; another user only"
                                            " with a service key granted act_as any_user)"),
    subject_id: str | None = Query(None, pattern=IDENTIFIER, max_length=200,
                                   description="Who or what it is about (default: the conversation's)"),
    budget_tokens: int = Query(500, ge=0, le=8000, description="Token budget for retrieved items"),
    as_of_seq: int | None = Query(None, ge=0, le=MAX_SEQ, description="Rebuild what turn N was served, compared"
                                  " with the recorded one (docs/lineage.md); not recorded itself"),
    *,
    request: Request,
    x_user_id: str | None = UserIdHeader,
) -> ContextOut:
    """Latest completed summary + the gap messages after it, relevant memories and the active topic,
    with the watermark it reflects."""
    started = time.monotonic()
    tenant = principal.tenant
    # The conversation's row is read in autocommit (a statement of its own: no BEGIN sent first, a
    # round trip less); the context's first reads then open the transaction their statements
    # need (api.turn_context.read_turn sends the BEGIN with them), which the search's COMMIT ends.
    # The pool takes the connection back out of autocommit (api.app.transactional_again). When the
    # process saw the conversation before (and the request has a before_seq, no min_seq or
    # as_of_seq), the row and the first reads go in one round trip, the reads made with the user
    # and subject seen then: kept only if the request made from the row sends the same statements.
    await conn.set_autocommit(True)  # no I/O: the connection is idle
    state, now = request.app.state, datetime.now(UTC)
    guess = None
    if min_seq is None and as_of_seq is None and before_seq is not None:
        guess = _guess(state, principal, conversation_id, x_user_id, user_id, subject_id, query, before_seq,
                       budget_tokens, now)
    reads = None
    if guess is not None:  # the conversation's row and the context's first reads in one round trip
        if query and query.strip():
            warm_query_embedding(state, query)  # on its thread while the reads travel
        conversation, reads = await telemetry.traced("context wait", read_conversation_and_turn(
            conn, guess, state, with_clock=True))
    if reads is None:
        conversation = await telemetry.traced("context wait", _wait_for(
            conn, tenant, conversation_id, min_seq, min(wait_ms, settings.api.max_wait_ms),
            settings.api.max_seq_ahead, state.log_ends))
    user = None if conversation is None else conversation_user(principal, conversation.user_id,
                                                                    named_in(x_user_id, user_id), "context")
    if conversation is None and guess is not None:
        state.conversation_owners.pop((tenant, conversation_id), None)
    if conversation is None or user is None:
        raise HTTPException(404, detail=f"conversation {conversation_id!r} not found")
    wanted = ContextRequest(
        conversation=conversation,
        user_id=user,
        subject_id=subject_id if subject_id is not None else conversation.subject_id,
        query=query,
        before_seq=before_seq,
        budget_tokens=budget_tokens,
        now=now,
    )
    _remember(state, conversation)
    if reads is not None and not same_reads(guess, wanted, state, with_clock=True):
        reads = None  # guessed wrong: read as the request says (in the transaction the guess's reads opened)
    if as_of_seq is not None:
        await conn.set_autocommit(False)  # idle again: the rebuild runs in transactions as before
        return await context_as_of(conn, wanted, as_of_seq, request.app.state)
    # The projection clock is read as the read begins, with its first statements (what as_of_seq
    # rebuilds: docs/lineage.md); the transaction holds only the context's reads.
    served, clock = await telemetry.traced("context", build_turn_context_clocked(
        conn, wanted, min_seq=min_seq, app_state=state, with_clock=True, end_reads=True, reads=reads))
    recorder_for(request.app.state).record(wanted, served, clock)  # off the critical path: never waits, never raises
    CONTEXT_LATENCY.observe(time.monotonic() - started)
    return served


OWNERS_MAX = 65_536  # conversations whose user and subject a process remembers (then it starts again)


def _remember(state, conversation: ConversationRow) -> None:
    """The conversation's user and subject, for the next request's guess (`_guess`)."""
    owners = getattr(state, "conversation_owners", None)
    if owners is None or len(owners) >= OWNERS_MAX:
        owners = state.conversation_owners = {}
    owners[(conversation.tenant_id, conversation.conversation_id)] = (conversation.user_id, conversation.subject_id)


def _guess(state, principal, conversation_id: str, x_user_id: str | None, user_id: str | None,
           subject_id: str | None, query: str | None, before_seq: int, budget_tokens: int,
           now: datetime) -> ContextRequest | None:
    """The request as it will be if the conversation still has the user and subject this process
    saw it with (None: never seen, or the caller names two users: that answer waits for the row).
    Only a guess: the reads made with it are kept only if the request made from the row read with
    them sends the same statements (api.turn_context.same_reads)."""
    owners = getattr(state, "conversation_owners", None)
    seen = None if owners is None else owners.get((principal.tenant, conversation_id))
    if seen is None or (x_user_id and user_id and x_user_id != user_id):
        return None
    owner, subject = seen
    user = principal.user if principal.user is not None else (x_user_id or user_id or owner)
    row = ConversationRow(principal.tenant, conversation_id, owner, subject, -1, 0, 0)
    return ContextRequest(conversation=row, user_id=user, subject_id=subject_id if subject_id is not None else subject,
                          query=query, before_seq=before_seq, budget_tokens=budget_tokens, now=now)


async def _wait_for(conn, tenant: str, conversation_id: str, min_seq: int | None, wait_ms: int, max_ahead: int,
                    log_ends: LogEnds):
    """The conversation once it reaches min_seq, or as it is when waiting cannot help: no min_seq
    (an unknown conversation is a 404 at once), min_seq further ahead of the projection than
    `max_ahead` (no wait can cover it), the wait is over, or the conversation is unknown although
    the messages projection holds everything its partition of the log had when the wait began
    (it does not exist: a 404 without waiting out `wait_ms`)."""
    deadline = time.monotonic() + wait_ms / 1000
    log_end: tuple | None | bool = False  # False: not asked yet; None: Kafka could not say
    while True:
        conversation = await queries.get_conversation(conn, tenant, conversation_id)
        if conversation is None and min_seq is not None and log_end is not None:
            if log_end is False:
                log_end = await log_ends.end_of(conversation_key(tenant, conversation_id))
            if log_end is not None and await projected_through(conn, *log_end):
                # Read again after the position: the projector commits rows and position together,
                # so the conversation is visible now if it was in the log when the wait began.
                conversation = await queries.get_conversation(conn, tenant, conversation_id)
                if conversation is None:
                    await conn.rollback()
                    return None
        if min_seq is None:  # no poll: the read goes on (each statement sees the latest commits)
            return conversation
        await conn.rollback()  # a fresh snapshot on every poll
        last = -1 if conversation is None else conversation.last_seq
        if last >= min_seq or min_seq - last > max_ahead or time.monotonic() >= deadline:
            return conversation
        await asyncio.sleep(0.02)

"""HTTP ingest for chat services that are not written in Python.

Every rule a consumer checks (schemas/limits.py) is checked here, before anything is
appended: a body or metadata over its limit is a 413, any other refusal a 422, both as
`{"detail": {"reason", "message"}}` with the reason codes of the dead-letter topic.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any

import logging

import orjson
import psycopg
from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, ConfigDict, Field

from api.auth import writer_may_append
from api.deps import ClientDep, PrincipalDep, append_or_503
from api.routes.context import ConversationId
from projections import queries
from core import metrics
from schemas.envelope import InvalidEvent

log = logging.getLogger(__name__)
TOO_LARGE_REASONS = frozenset({"oversized", "metadata_too_large"})
# JSON around the event's own fields (the envelope adds about as much as the body's keys).
BODY_SLACK_BYTES = 4096


def _refusal(reason: str, message: str) -> dict:
    return {"detail": {"reason": reason, "message": message}}


class _BodyLimitedRoute(APIRoute):
    """Refuses a body larger than an event may be (413) before it is read whole or parsed,
    parses it strictly (orjson: UTF-8, nesting ≤ 1024), and answers every refusal in the
    one `{"detail": {"reason", "message"}}` shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def limited(request: Request) -> Response:
            limit = request.app.state.settings.kafka.max_event_bytes + BODY_SLACK_BYTES
            declared = request.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                return _too_large(int(declared), limit)
            if request.method == "POST":
                body = bytearray()
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > limit:
                        return _too_large(len(body), limit, at_least=True)
                request._body = bytes(body)  # what FastAPI's body parsing reads
                refused = _parse(request, request._body)
                if refused is not None:
                    return refused
            try:
                return await handler(request)
            except RequestValidationError as exc:  # the body's shape (MessageIn), before any rule
                return _unprocessable("invalid_field", _describe(exc.errors()))

        return limited


def _parse(request: Request, body: bytes) -> Response | None:
    """The body as JSON for FastAPI (`request._json`), or the refusal."""
    if not body:
        return None  # FastAPI says which field is missing
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _unprocessable("bad_utf8", f"request body is not UTF-8: {exc}")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _unprocessable("not_json", f"request body is not JSON: {exc}")
    if not isinstance(data, dict):
        return _unprocessable("not_an_object", f"request body is a JSON {type(data).__name__}, not an object")
    request._json = data  # what FastAPI's body parsing reads (Starlette caches it there)
    return None


def _describe(errors: Sequence[Any]) -> str:
    parts = []
    for error in list(errors)[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def _unprocessable(reason: str, message: str) -> Response:
    return JSONResponse(_refusal(reason, message[:2000]), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


def _too_large(size: int, limit: int, *, at_least: bool = False) -> Response:
    said = f"at least {size}" if at_least else str(size)
    return JSONResponse(
        _refusal("oversized", f"request body of {said} bytes > limit {limit} (MEMORY_KAFKA__MAX_EVENT_BYTES)"),
        status_code=status.HTTP_413_CONTENT_TOO_LARGE,
    )


router = APIRouter(prefix="/v1/conversations", tags=["ingest"], route_class=_BodyLimitedRoute)


class MessageIn(BaseModel):
    """One chat message; the tenant comes from the API key."""

    model_config = ConfigDict(extra="forbid")

    user_id: Any = Field(description="The user who owns the conversation")
    seq: Any = Field(description="0-based position in the conversation, set by the producer; at most 2147483647")
    role: Any = Field(description="user | assistant | system | tool")
    content: Any = Field(description="Text without NUL (\\u0000); at most MEMORY_LIMITS__MAX_CONTENT_CHARS characters")
    subject_id: Any = None
    metadata: dict[str, Any] | None = Field(
        None, description="Free-form JSON without NUL; at most MEMORY_LIMITS__MAX_METADATA_BYTES encoded (413 above)"
    )
    event_id: Any = Field(None, description="Idempotency key; generated when omitted")
    occurred_at: datetime | None = None


class Appended(BaseModel):
    event_id: str
    conversation_id: str
    seq: int
    partition: int
    offset: int


class Refusal(BaseModel):
    reason: str = Field(description="The dead-letter topic's reason code, e.g. invalid_field, out_of_range")
    message: str
    errors: list[dict[str, Any]] | None = Field(None, description="Every refused field: loc, msg, type (the reason)")


class Refused(BaseModel):
    detail: Refusal


@router.post(
    "/{conversation_id}/messages", status_code=status.HTTP_202_ACCEPTED, response_model=Appended,
    responses={409: {"model": Refused, "description": "The conversation belongs to another user (owner_conflict),"
                                                      " or the seq holds another message (seq_conflict); nothing"
                                                      " appended"},
               413: {"model": Refused, "description": "Body or metadata over its limit; nothing appended"},
               422: {"model": Refused, "description": "Refused input (reason codes of docs/backbone.md), every bad"
                                                      " field listed in `errors`; nothing appended"},
               503: {"description": "The log (Kafka) is unavailable"}},
)
async def append_message(body: MessageIn, principal: PrincipalDep, client: ClientDep, request: Request,
                         conversation_id: str = ConversationId,
                         other_user: bool = Query(False, description="The message's user is not the conversation's"
                                                  " owner (its first message's user): add it anyway (a key granted"
                                                  " act_as any_user only; else 409)")) -> Appended:
    """Validate and append to the conversation log. 413 or 422 with a reason code on bad input;
    409 when the read model already knows the conversation's owner or the seq to differ."""
    tenant = principal.tenant
    envelope = _envelope(client, tenant, conversation_id, body)
    stored = await _check_against_read_model(request, principal, conversation_id, envelope, other_user)
    if stored is not None:  # the same message is already projected at this seq: nothing appended
        return stored
    meta = await append_or_503(request, envelope)
    metrics.INGESTED.inc()
    return Appended(
        event_id=envelope.event_id, conversation_id=conversation_id, seq=envelope.seq,
        partition=meta.partition, offset=meta.offset,
    )


# A valid value of each field, to check one field of a refused body on its own (every bad field named).
_STAND_INS = {"user_id": "u", "seq": 0, "role": "user", "content": "x", "subject_id": None, "metadata": None,
              "event_id": None, "occurred_at": None}


def _envelope(client, tenant: str, conversation_id: str, body: MessageIn):
    """The checked event, or the refusal: 413 for a size, else 422 listing every bad field."""
    fields = body.model_dump()
    problems = _field_problems(client, tenant, conversation_id, fields)
    if not problems:
        try:
            return client.message_event(tenant_id=tenant, conversation_id=conversation_id, **fields)
        except InvalidEvent as exc:  # the fields together (e.g. the whole event's size)
            problems = [(None, exc.reason, exc.detail)]
    too_large = [p for p in problems if p[1] in TOO_LARGE_REASONS]
    if too_large:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                            detail={"reason": too_large[0][1], "message": too_large[0][2]})
    raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail={
        "reason": problems[0][1], "message": "; ".join(message for _, _, message in problems)[:2000],
        "errors": [{"loc": ["body", field] if field else ["body"], "msg": message, "type": reason}
                   for field, reason, message in problems]})


def _field_problems(client, tenant: str, conversation_id: str, fields: dict) -> list[tuple[str, str, str]]:
    """(field, reason, message) of every field that is refused on its own (the event's rules,
    schemas/limits.py, and a blank content)."""
    problems = []
    for name in _STAND_INS:
        try:
            client.message_event(tenant_id=tenant, conversation_id=conversation_id,
                                 **{**_STAND_INS, name: fields[name]})
        except InvalidEvent as exc:
            problems.append((name, exc.reason, exc.detail))
    content = fields["content"]
    if isinstance(content, str) and not content.strip() and not any(p[0] == "content" for p in problems):
        problems.append(("content", "invalid_field", "content: is empty (a message holds some text)"))
    return problems


async def _check_against_read_model(request: Request, principal, conversation_id: str, envelope,
                                    other_user: bool) -> Appended | None:
    """What the read model already knows: the conversation's owner (fixed by its first message;
    api/auth.py writer_may_append) and the message at this seq. A different message at a taken
    seq is a 409 (the projector would dead-letter it as seq_conflict); the same message again
    (user, role, content) is answered with the stored event and nothing is appended. Messages
    still on their way to the read model are not known here: they are checked by the projector."""
    state = request.app.state
    try:
        async with state.tenant_slots.hold(principal.tenant), \
                state.pool.connection(timeout=state.settings.api.pool_timeout_s) as conn:
            await state.generation.use(conn)
            found = await queries.get_conversation(conn, principal.tenant, conversation_id)
            writer_may_append(principal, envelope.user_id, found.user_id if found else None, other_user)
            if found is None or envelope.seq > found.last_seq:
                return None
            row = await (await conn.execute(
                "SELECT event_id, user_id, role, content, source_partition, source_offset FROM messages"
                " WHERE tenant_id = %s AND conversation_id = %s AND seq = %s",
                (principal.tenant, conversation_id, envelope.seq))).fetchone()
    except (psycopg.OperationalError, PoolTimeout) as exc:
        if principal.user is not None:
            raise  # a user key's ownership cannot be checked: 503 (api/errors.py)
        # Ingest keeps working while PostgreSQL is down; the projector still refuses a taken seq.
        log.warning("ingest without the read model's checks (PostgreSQL unavailable): %s", type(exc).__name__)
        return None
    if row is None or row[0] == envelope.event_id:
        return None  # a free seq, or the same event again (the projector counts it as a duplicate)
    if (row[1], row[2], row[3]) == (envelope.user_id, envelope.payload.get("role"), envelope.payload.get("content")):
        return Appended(event_id=row[0], conversation_id=conversation_id, seq=envelope.seq,
                        partition=row[4], offset=row[5])
    raise HTTPException(status.HTTP_409_CONFLICT, detail={
        "reason": "seq_conflict",
        "message": f"seq {envelope.seq} of conversation {conversation_id!r} already holds another message"
                   f" (event {row[0]}): nothing appended; the next free seq is at least {found.last_seq + 1}"})

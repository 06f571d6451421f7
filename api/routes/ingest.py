"""HTTP ingest for chat services that are not written in Python.

Every rule a consumer checks (schemas/limits.py) is checked here, before anything is
appended: a body or metadata over its limit is a 413, any other refusal a 422, both as
`{"detail": {"reason", "message"}}` with the reason codes of the dead-letter topic.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any

import orjson
from fastapi import APIRouter, HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from api.auth import writer_may_append
from api.deps import ClientDep, PrincipalDep, append_or_503
from api.routes.context import ConversationId
from projections import queries
from core import metrics
from schemas.envelope import InvalidEvent

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


class Refused(BaseModel):
    detail: Refusal


@router.post(
    "/{conversation_id}/messages", status_code=status.HTTP_202_ACCEPTED, response_model=Appended,
    responses={413: {"model": Refused, "description": "Body or metadata over its limit; nothing appended"},
               422: {"model": Refused, "description": "Refused input (reason codes of docs/backbone.md); nothing"
                                                      " appended"},
               503: {"description": "The log (Kafka) is unavailable"}},
)
async def append_message(body: MessageIn, principal: PrincipalDep, client: ClientDep, request: Request,
                         conversation_id: str = ConversationId) -> Appended:
    """Validate and append to the conversation log. 413 or 422 with a reason code on bad input."""
    tenant = principal.tenant
    await _may_append(request, principal, conversation_id, body.user_id)
    try:
        envelope = client.message_event(tenant_id=tenant, conversation_id=conversation_id, **body.model_dump())
    except InvalidEvent as exc:
        code = status.HTTP_413_CONTENT_TOO_LARGE if exc.reason in TOO_LARGE_REASONS else status.HTTP_422_UNPROCESSABLE_CONTENT
        raise HTTPException(code, detail={"reason": exc.reason, "message": exc.detail}) from None
    meta = await append_or_503(request, envelope)
    metrics.INGESTED.inc()
    return Appended(
        event_id=envelope.event_id, conversation_id=conversation_id, seq=envelope.seq,
        partition=meta.partition, offset=meta.offset,
    )


async def _may_append(request: Request, principal, conversation_id: str, user_id: object) -> None:
    """A key bound to a user appends as that user, to its own conversations only."""
    if principal.user is None:
        return
    owner = None
    if user_id == principal.user:
        async with request.app.state.pool.connection(timeout=request.app.state.settings.api.pool_timeout_s) as conn:
            await request.app.state.generation.use(conn)
            found = await queries.get_conversation(conn, principal.tenant, conversation_id)
            owner = found.user_id if found else None
    writer_may_append(principal, user_id, owner)

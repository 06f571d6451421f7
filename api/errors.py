"""One shape per error, clear messages, and every answer the API can give declared in its OpenAPI.

- 422: {"detail": {"reason", "message", "errors"?}} for every endpoint (FastAPI's own
  validation errors are turned into the same shape the ingest endpoint uses);
- 400: a path with an encoded '/' or a '.'/'..' segment, a body that is not UTF-8 or nests too deep;
- 422 (reason `invalid_field`): a NUL (%00) in the path or any query parameter (PostgreSQL cannot
  store it: one check here for every route, never a 500 or a silently empty answer);
- 404 names the endpoint; 405 carries `Allow` with every method of the path;
- a statement timeout, an unreachable database or a full pool: 503 with Retry-After.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import parse_qsl, unquote

import psycopg
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)
RETRY = {"Retry-After": "1"}


def _loc(loc: Any) -> str:
    return ".".join(str(part) for part in loc)


def one_line(text: str, field: str) -> str:
    """Whitespace runs (every character `str.split` counts, control separators too) as one
    space; a text that is nothing else is refused with the usual 422 shape."""
    normalized = " ".join(text.split())
    if not normalized:
        raise HTTPException(422, detail={"reason": "invalid_request", "message": f"{field}: is blank"})
    return normalized


def route_template(scope: dict) -> str:
    """The matched route's path template ("/v1/facts/{fact_id}"), never the ids or the query."""
    route = scope.get("route")
    return getattr(route, "path", None) or "(no route)"


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
              for e in exc.errors()]
    message = "; ".join(f"{_loc(e['loc'])}: {e['msg']}" for e in errors) or "invalid request"
    return JSONResponse({"detail": {"reason": "invalid_request", "message": message, "errors": errors}},
                        status_code=422)


def _allowed(request: Request) -> list[str]:
    """Every method some operation of this path answers (read from the OpenAPI document)."""
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), request.url.path):
            methods |= {m.upper() for m in operations}
    return sorted(methods)


async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    headers = dict(exc.headers or {})
    detail: Any = exc.detail
    cause = exc.__cause__
    if exc.status_code == 400 and isinstance(cause, UnicodeDecodeError):
        detail = f"the body is not valid UTF-8 (byte 0x{cause.object[cause.start]:02x} at position {cause.start})"
    elif exc.status_code == 400 and isinstance(cause, RecursionError):
        detail = "the JSON body nests too deeply to parse"
    elif exc.status_code == 404 and detail == "Not Found":
        detail = f"no endpoint {request.method} {request.url.path} (see /docs)"
    elif exc.status_code == 405:
        allowed = _allowed(request)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.method} is not allowed on {request.url.path}; allowed: {', '.join(allowed)}"
    return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers or None)


async def statement_timeout(request: Request, exc: psycopg.errors.QueryCanceled) -> JSONResponse:
    timeout = request.app.state.settings.api.statement_timeout_ms
    return JSONResponse({"detail": f"the query took longer than the statement timeout ({timeout} ms)"},
                        status_code=503, headers=RETRY)


async def unstorable_value(request: Request, exc: psycopg.DataError) -> JSONResponse:
    """A value PostgreSQL refuses (a NUL in a body's text): the caller's input, not a server fault."""
    return JSONResponse({"detail": {"reason": "invalid_request",
                                    "message": f"a value of the request cannot be stored or searched: {exc}"}},
                        status_code=422)


async def database_down(request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable for %s %s: %s", request.method, route_template(request.scope), exc)
    return JSONResponse({"detail": "the database is unavailable; retry shortly"}, status_code=503, headers=RETRY)


def nul_problem(path: str, query_string: bytes) -> JSONResponse | None:
    """The 422 for a NUL in the path or in query parameters, naming each place; None when there
    is none. PostgreSQL cannot store a NUL: refused here, for every route, rather than a 500 or
    a silently empty answer further in."""
    errors = []
    if "\x00" in path:
        errors.append({"loc": ["path"], "msg": "holds a NUL (%00): not a valid identifier", "type": "nul_character"})
    if b"%00" in query_string or b"\x00" in query_string:
        named = [name for name, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True,
                                                   encoding="utf-8", errors="replace")
                 if "\x00" in name or "\x00" in value]
        errors += [{"loc": ["query", name.replace("\x00", "\\0")], "msg": "must not contain NUL (%00)",
                    "type": "nul_character"} for name in dict.fromkeys(named)]
    if not errors:
        return None
    message = "; ".join(f"{_loc(e['loc'])}: {e['msg']}" for e in errors)
    return JSONResponse({"detail": {"reason": "invalid_field", "message": message, "errors": errors}},
                        status_code=422)


class PathGuard:
    """ASGI middleware, in front of every route: an encoded '/', a '.'/'..' segment or a NUL in
    the path is refused with a 400 naming it (identifiers never contain '/', a dot segment would
    address another resource); a NUL in the path or a query parameter with a 422 naming it
    (`nul_problem`)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            raw = (scope.get("raw_path") or scope["path"].encode()).split(b"?", 1)[0].decode("latin-1")
            problem = None
            if "%2f" in raw.lower():
                problem = "the path holds an encoded '/' (%2F): identifiers may not contain '/'"
            elif any(unquote(segment) in (".", "..") for segment in raw.split("/")):
                problem = "the path holds a '.' or '..' segment: not a valid identifier"
            if problem:
                await JSONResponse({"detail": problem}, status_code=400)(scope, receive, send)
                return
            refused = nul_problem(scope["path"], scope.get("query_string") or b"")
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(psycopg.errors.QueryCanceled, statement_timeout)
    app.add_exception_handler(psycopg.OperationalError, database_down)
    app.add_exception_handler(psycopg.DataError, unstorable_value)
    app.add_exception_handler(PoolTimeout, database_down)
    app.add_middleware(PathGuard)
    app.openapi = lambda: _openapi(app)


PROBLEM = {"type": "object", "title": "Problem", "required": ["detail"],
           "properties": {"detail": {"title": "Detail", "type": "string"}}}
VALIDATION_PROBLEM = {
    "type": "object", "title": "ValidationProblem", "required": ["detail"],
    "properties": {"detail": {
        "type": "object", "required": ["reason", "message"],
        "properties": {
            "reason": {"type": "string", "description": "invalid_request, or the event reason code (ingest)"},
            "message": {"type": "string"},
            "errors": {"type": "array", "items": {
                "type": "object", "properties": {
                    "loc": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                    "msg": {"type": "string"}, "type": {"type": "string"}}}},
        }}},
}
DESCRIPTIONS = {
    "400": "Malformed request: a path with '/' or '..' in an identifier, a body that is not UTF-8 or nests"
           " too deep, or a service key that did not name the acting user",
    "401": "Missing or unknown key",
    "403": "The key may not act for this user",
    "404": "Not found for this key (unknown, another tenant's, or another user's)",
    "413": "Body too large",
    "429": "This tenant has too many reads in progress; retry after Retry-After seconds",
    "503": "A dependency (PostgreSQL, Kafka) is unavailable or a query timed out; retry after Retry-After",
}


def _codes(path: str, operation: dict) -> list[str]:
    if path.startswith("/v1/admin"):
        return ["401", "503"]
    if path.startswith("/v1/"):
        codes = ["400", "401", "403", "404", "429", "503"]
        return codes + (["413"] if "requestBody" in operation else [])
    return ["503"] if path == "/readyz" else []


def _openapi(app: FastAPI) -> dict:
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = PROBLEM
    schemas["ValidationProblem"] = VALIDATION_PROBLEM
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    retry = {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            if "422" in responses or operation.get("parameters") or "requestBody" in operation:
                responses["422"] = {"description": "Validation error", "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ValidationProblem"}}}}
            for code in _codes(path, operation):
                entry = {"description": DESCRIPTIONS[code],
                         "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}
                if code in ("429", "503"):
                    entry["headers"] = retry
                responses.setdefault(code, entry)
    app.openapi_schema = schema
    return schema

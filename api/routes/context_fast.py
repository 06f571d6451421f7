"""The context route's fast path: a well-formed request skips FastAPI's dependency solving and
per-parameter validation (a third of the endpoint's Python); anything else takes FastAPI's path."""

from __future__ import annotations

import re
import types
import typing
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Mapping, Sequence

import annotated_types
import anyio
from fastapi import Request, Response
from fastapi.exceptions import ResponseValidationError
from fastapi.routing import APIRoute

from api.deps import api_key_header, connection_for, get_conn, get_principal, get_settings
from schemas.envelope import IDENTIFIER

# What FastAPI would accept unchanged, checked more strictly than its validation: a value this
# refuses is left to FastAPI (which accepts it or answers 422 as always), never refused here.
_IDENTIFIER = re.compile(IDENTIFIER.removeprefix("^").removesuffix("$") + r"\Z")  # no trailing newline
_DIGITS = re.compile(r"(?:0|[1-9][0-9]{0,9})\Z")
Handler = Callable[[Request], Coroutine[Any, Any, Response]]
DEPENDENCIES = (get_principal, get_conn, get_settings)  # the endpoint's first three arguments, in order


@dataclass(frozen=True)
class Param:
    """One path, query or header parameter as the route declares it."""

    name: str
    key: str  # its name in the query, or its header (lower case)
    number: bool  # an int (else a str)
    low: int | None = None
    high: int | None = None
    max_length: int | None = None
    identifier: bool = False  # the IDENTIFIER pattern
    default: Any = None

    def accepted(self, value: str) -> Any:
        """The value FastAPI would pass for this text, or None when it might refuse it."""
        if self.number:
            if _DIGITS.match(value) is None:
                return None
            number = int(value)
            low, high = -(2**63) if self.low is None else self.low, 2**63 if self.high is None else self.high
            return number if low <= number <= high else None
        if self.max_length is not None and len(value) > self.max_length:
            return None
        return None if self.identifier and _IDENTIFIER.match(value) is None else value


@dataclass(frozen=True)
class Spec:
    path: tuple[Param, ...]
    query: dict[str, Param]
    headers: tuple[Param, ...]


def param_of(field: Any, key: str) -> Param | None:
    """A parameter the fast path can check, or None (a type or constraint it does not know)."""
    info = field.field_info
    kinds = set(typing.get_args(info.annotation)) - {type(None)} if isinstance(
        info.annotation, types.UnionType) else {info.annotation}
    if kinds not in ({int}, {str}):
        return None
    limits: dict[str, Any] = {}
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge):
            limits["low"] = item.ge
        elif isinstance(item, annotated_types.Le):
            limits["high"] = item.le
        elif isinstance(item, annotated_types.MaxLen):
            limits["max_length"] = item.max_length
        elif getattr(item, "pattern", None) == IDENTIFIER:
            limits["identifier"] = True
        else:
            return None
    default = None if info.is_required() else info.default
    return Param(field.name, key, kinds == {int}, default=default, **limits)


def spec_of(route: APIRoute) -> Spec | None:
    """The route's parameters, or None when the fast path cannot serve it as FastAPI would:
    other dependencies than the caller, its connection and the settings; a body; a parameter
    of a kind it does not check."""
    dependant = route.dependant
    if (tuple(d.call for d in dependant.dependencies) != DEPENDENCIES or dependant.body_params
            or dependant.cookie_params):
        return None
    path = [param_of(f, f.alias) for f in dependant.path_params]
    query = [param_of(f, f.alias) for f in dependant.query_params]
    headers = [param_of(f, f.alias.lower()) for f in dependant.header_params]
    if None in path + query + headers:
        return None
    return Spec(tuple(path), {p.key: p for p in query}, tuple(headers))


def plain_arguments(spec: Spec, path: Mapping[str, str], query: Sequence[tuple[str, str]],
                    headers: Mapping[str, list[str]]) -> dict | None:
    """The endpoint's keyword arguments when every parameter is one FastAPI accepts as it is
    (pure: the path parameters, the query's items, the declared headers' values), else None:
    a repeated parameter or header, a number not in plain digits or out of range, an identifier
    or a text FastAPI might refuse."""
    arguments = {p.name: p.default for p in spec.query.values()}
    for param in spec.path:
        arguments[param.name] = param.accepted(path.get(param.key, ""))
        if arguments[param.name] is None:
            return None
    for param in spec.headers:
        values = headers.get(param.key, [])
        if len(values) > 1:
            return None
        arguments[param.name] = param.accepted(values[0]) if values else param.default
        if values and arguments[param.name] is None:
            return None
    seen: set[str] = set()
    for key, value in query:
        if key in seen:
            return None
        seen.add(key)
        param = spec.query.get(key)
        if param is not None:
            arguments[param.name] = param.accepted(value)
            if arguments[param.name] is None:
                return None
    return arguments


async def held_until_sent(request: Request, held: AbstractAsyncContextManager) -> Any:
    """Entered now, left once the response is sent (or the request fails), its exit shielded
    from cancellation: as FastAPI does for a request-scoped dependency with yield."""
    value = await held.__aenter__()

    async def leave(*error: Any) -> bool | None:
        with anyio.CancelScope(shield=True):
            return await held.__aexit__(*error)

    request.scope["fastapi_inner_astack"].push_async_exit(leave)
    return value


class ContextRoute(APIRoute):
    """FastAPI's route (the same OpenAPI, the same errors), with the fast path in front of its
    handler (not taken while an app overrides dependencies): the same dependencies' code (the
    caller's key, its connection, released after the response as FastAPI's request-scoped
    dependencies are), the same endpoint, the same serialization of the response model."""

    def get_route_handler(self) -> Handler:
        slow = super().get_route_handler()
        spec, endpoint, field = spec_of(self), self.endpoint, self.response_field
        if spec is None or field is None:
            return slow
        header_keys = [p.key for p in spec.headers]
        names = [d.name for d in self.dependant.dependencies]

        async def handler(request: Request) -> Response:
            arguments = plain_arguments(spec, request.path_params, request.query_params.multi_items(),
                                        {key: request.headers.getlist(key) for key in header_keys})
            if arguments is None or getattr(request.app, "dependency_overrides", None):
                return await slow(request)  # FastAPI's checks and errors, or dependencies overridden (tests)
            state = request.app.state
            principal = await get_principal(request, await api_key_header(request))
            conn = await held_until_sent(request, connection_for(state, principal.tenant))
            arguments.update(zip(names, (principal, conn, await get_settings(request))))
            out = await endpoint(request=request, **arguments)
            value, errors = field.validate(out, {}, loc=("response",))
            if errors:
                raise ResponseValidationError(errors=errors, body=out)
            return Response(content=field.serialize_json(value), media_type="application/json")

        return handler

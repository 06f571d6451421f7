"""The access log without ids, query strings or text: uvicorn's access lines name the route's
path template ("GET /v1/conversations/{conversation_id}/context 200"), never the path as sent
(an erased user's id) or its query (`?query=` holds what a user typed). docs/security.md."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute

ACCESS_LOGGER = "uvicorn.access"


def http_routes(routes: Sequence[BaseRoute]) -> list:
    """Every route of an app (routers' included ones too) as FastAPI's route contexts: `path`,
    `methods`, `path_regex`, `param_convertors`, `dependant`; mounts (static files) included."""
    return list(iter_route_contexts(routes))


def template_of(routes: Sequence, method: str, path: str) -> str:
    """The template of the route that answers `method path` ("(no route)" when none does)."""
    path = path.split("?", 1)[0]
    matched = [r for r in routes if getattr(r, "path_regex", None) is not None and r.path_regex.match(path)]
    for route in matched:
        if route.methods is None or method in route.methods:
            return route.path if route.methods is not None else route.path + "/{path}"
    return matched[0].path if matched else "(no route)"


class TemplatePaths(logging.Filter):
    """Rewrites uvicorn's access record (client, method, path with query, version, status): the
    path becomes its route's template; the client address is kept."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        super().__init__()
        self._app_routes = routes
        self._routes: list | None = None

    @property
    def routes(self) -> list:
        if self._routes is None:  # on the first request: every router is included by then
            self._routes = http_routes(self._app_routes)
        return self._routes

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], template_of(self.routes, str(args[1]), args[2]), args[3], args[4])
        elif isinstance(args, tuple):  # an access line of another shape: keep no argument that may hold a query
            record.args = tuple("?" if isinstance(a, str) and "?" in a else a for a in args)
        return True


def install(routes: Sequence[BaseRoute]) -> None:
    """One filter on uvicorn's access logger, reading these routes (the latest app's)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    for existing in [f for f in logger.filters if isinstance(f, TemplatePaths)]:
        logger.removeFilter(existing)
    logger.addFilter(TemplatePaths(routes))

"""A server span per HTTP request, named by its route template (never the path as sent or its query)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core import telemetry

NO_ROUTE = "(no route)"


class TraceRequests:
    """ASGI middleware, installed only when tracing is on: the span takes the route's template
    once the router has matched it, the response's status, and a caller's traceparent as its
    parent (a chat service's trace goes on into ours)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not telemetry.enabled():
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        status: list[int] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        with telemetry.span(method, {"http.request.method": method}, kind="server",
                            parent=telemetry.http_context(scope["headers"])) as current:
            try:
                await self.app(scope, receive, sending)
            finally:
                route = getattr(scope.get("route"), "path", None) or NO_ROUTE  # set by the router in place
                current.update_name(f"{method} {route}")
                current.set_attribute("http.route", route)
                if status:
                    current.set_attribute("http.response.status_code", status[0])

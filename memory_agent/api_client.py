"""A small async client of the HTTP API: what the CLI memory commands and the MCP server call.

The tenant (and, for a key bound to a user, the user) come from the API key; a service key
names the acting user with X-User-Id, taken from the configuration, never from a tool argument.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from core.settings import HASHED_PREFIX, Settings


# Where the CLI and the MCP server take the acting user of a service key from.
USER_HINT = "pass --user USER or set MEMORY_CLIENT__USER (a key bound to a user needs none)"


class ApiError(Exception):
    """The API answered with an error status, or could not be reached (status 0)."""

    def __init__(self, status: int, detail: Any) -> None:
        self.status, self.detail = status, detail
        super().__init__(f"{status}: {self.message}")

    @property
    def message(self) -> str:
        detail = self.detail
        if isinstance(detail, dict) and "detail" in detail:
            detail = detail["detail"]
        if isinstance(detail, dict):
            return str(detail.get("message") or detail)
        return str(detail)


@dataclass(frozen=True)
class Connection:
    url: str
    api_key: str | None
    user: str | None
    timeout_s: float = 30.0

    @classmethod
    def from_settings(cls, settings: Settings, *, url: str | None = None, api_key: str | None = None,
                      user: str | None = None) -> "Connection":
        """Flags first, then MEMORY_CLIENT__*, then the API's own settings (`make run`: dev-key)."""
        client = settings.client
        key = api_key or (client.api_key.get_secret_value() if client.api_key else None)
        if key is None:
            key = next((k for k in settings.api.api_keys if not k.startswith(HASHED_PREFIX)), None)
        base = url or client.url or f"http://{settings.api.host}:{settings.api.port}"
        return cls(base.rstrip("/"), key, user or client.user, client.timeout_s)

    def headers(self) -> dict[str, str]:
        headers = {}
        if self.api_key:
            headers["X-API-Key"] = self.api_key
        if self.user:
            headers["X-User-Id"] = self.user
        return headers


class MemoryApi:
    """One method per endpoint; every error is an ApiError with the API's status and detail."""

    def __init__(self, connection: Connection, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.connection = connection
        self._http = httpx.AsyncClient(base_url=connection.url, headers=connection.headers(),
                                       timeout=connection.timeout_s, transport=transport)

    async def __aenter__(self) -> "MemoryApi":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach the API at {self.connection.url}: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            try:
                detail = response.json()
            except ValueError:
                detail = response.text
            raise self._error(response.status_code, detail)
        return response.json()

    def _error(self, status: int, detail: Any) -> "ApiError":
        """The API's error, with how to name the acting user when it is missing (the API speaks of headers)."""
        error = ApiError(status, detail)
        if self.connection.user is None and "X-User-Id" in error.message:
            return ApiError(status, f"{error.message}: no acting user is set; {USER_HINT}")
        return error

    async def search(self, query: str, *, kinds: list[str] | None = None, subject_id: str | None = None,
                     since: str | None = None, until: str | None = None, k: int = 10) -> dict:
        params = {"q": query, "k": k, "kinds": ",".join(kinds) if kinds else None, "subject_id": subject_id,
                  "since": since, "until": until}
        return await self._call("GET", "/v1/search", params={k: v for k, v in params.items() if v is not None})

    async def store(self, content: str, *, category: str = "other", memory_type: str = "general",
                    importance: int = 3, tags: list[str] | None = None, visibility: str = "private",
                    subject_id: str | None = None, wait: bool = True) -> dict:
        body = {"content": content, "category": category, "memory_type": memory_type, "importance": importance,
                "tags": tags or [], "visibility": visibility, "subject_id": subject_id}
        return await self._call("POST", "/v1/memories", json=body, params={"wait": str(wait).lower()})

    async def acting_user(self) -> str:
        """The user this connection acts as (the key's own, or the named one); an ApiError when
        there is none: the check `memory-agent mcp` makes at start."""
        return (await self._call("GET", "/v1/facts", params={"include_superseded": "false"}))["user_id"]

    async def list_memories(self, *, subject_id: str | None = None, include_superseded: bool = False) -> dict:
        params = {"include_superseded": str(include_superseded).lower()}
        if subject_id is not None:
            params["subject_id"] = subject_id
        return await self._call("GET", "/v1/facts", params=params)

    async def show(self, fact_id: str) -> dict:
        return await self._call("GET", f"/v1/facts/{_segment(fact_id)}")

    async def edit(self, fact_id: str, content: str, *, wait: bool = True) -> dict:
        """A new version of one of my memories (the old one stays in its history)."""
        return await self._call("PATCH", f"/v1/facts/{_segment(fact_id)}", json={"content": content},
                                params={"wait": str(wait).lower()})

    async def forget(self, fact_id: str, *, wait: bool = True) -> dict:
        return await self._call("DELETE", f"/v1/facts/{_segment(fact_id)}", params={"wait": str(wait).lower()})

    async def context(self, conversation_id: str, *, query: str | None = None, before_seq: int | None = None,
                      budget_tokens: int | None = None) -> dict:
        params = {"query": query, "before_seq": before_seq, "budget_tokens": budget_tokens}
        return await self._call("GET", f"/v1/conversations/{_segment(conversation_id)}/context",
                                params={k: v for k, v in params.items() if v is not None})

    async def export(self) -> AsyncIterator[bytes]:
        """The user's memory as JSON Lines, chunk by chunk as the API streams it."""
        try:
            async with self._http.stream("GET", "/v1/export") as response:
                if response.status_code >= 400:
                    body = await response.aread()
                    try:
                        detail: Any = httpx.Response(response.status_code, content=body).json()
                    except ValueError:
                        detail = body.decode("utf-8", "replace")
                    raise self._error(response.status_code, detail)
                async for chunk in response.aiter_bytes():
                    yield chunk
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach the API at {self.connection.url}: {type(exc).__name__}: {exc}") from None


def _segment(value: str) -> str:
    """An identifier as one path segment (the API refuses '/' in identifiers)."""
    return quote(value, safe="")

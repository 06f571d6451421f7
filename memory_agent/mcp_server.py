"""`memory-agent mcp`: the memory as MCP tools (seed 001's "v1 decision"), a thin door on the HTTP API.

Who acts never comes from a tool argument: over stdio the API key (and, for a service key,
the user) come from the configuration (MEMORY_CLIENT__* or the command's flags); over
streamable HTTP from each request's own `X-API-Key` (or `Authorization: Bearer KEY`) and
`X-User-Id` headers, checked against the API before any MCP message is handled.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from memory_agent.api_client import ApiError, Connection, MemoryApi

Kind = Literal["fact", "chunk", "message"]
MemoryType = Literal["decision", "insight", "fact", "preference", "project", "conversation", "general"]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$", max_length=200)]


class Score(BaseModel):
    final: float = Field(description="The ranking score: relevance x importance_weight x recency_weight")
    cosine: float = Field(description="Closeness in meaning to the query, -1..1")
    keyword_score: float = Field(description="Share of the query's rarer words the item contains, 0..1")
    importance_weight: float
    recency_weight: float
    found_by: list[str] = Field(description="vector (by meaning) and/or keyword")
    similarity: float = Field(description="Deprecated (use cosine and keyword_score): the weighted sum of meaning"
                                          " and keyword relevance, which may exceed 1")


class Hit(BaseModel):
    id: str = Field(description="A fact id (usable with forget_memory), chunk id or conversation:seq")
    kind: Kind
    content: str
    line: str = Field(description="The line as it would go into a prompt, with its date")
    category: str | None = None
    conversation_id: str | None = None
    occurred_start: str | None = None
    occurred_end: str | None = None
    score: Score


class SearchResult(BaseModel):
    query: str
    user_id: str
    items: list[Hit] = Field(description="Best first, all above the threshold")
    matched: int = Field(description="Items above the threshold")
    threshold: float


class StoredMemory(BaseModel):
    event_id: str
    memory_id: str = Field(description="The fact holding the memory (an existing one if it was merged)")
    outcome: Literal["stored", "merged", "accepted"] = Field(
        description="stored: a new memory; merged: folded into a near-identical one; accepted: not projected yet")


class Memory(BaseModel):
    memory_id: str
    content: str
    category: str
    memory_type: str
    importance: int = Field(description="1 trivial .. 5 critical")
    tags: list[str] = Field(description="Topic tags (an empty list when there are none)")
    visibility: str = Field(description="private, or shared with the subject's other users")
    shared_by: str | None = Field(None, description="The user who shared it, when it is not yours")
    subject_id: str | None = Field(None, description="Who or what it is about (null: none)")
    updated: str = Field(description="Date of the last change, YYYY-MM-DD")
    # Deprecated aliases, kept beside the fields that replaced them: the tools' outputs are public and
    # change by adding (docs/surfaces.md).
    mine: bool = Field(description="Deprecated (use shared_by): false when another user shared it")
    updated_at: str = Field(description="Deprecated (use updated): time of the last change, ISO 8601")


class MemoryList(BaseModel):
    user_id: str
    memories: list[Memory]


class Forgotten(BaseModel):
    memory_id: str
    event_id: str
    applied: bool = Field(description="The read model shows the deletion already")


class ContextMessage(BaseModel):
    seq: int
    role: str
    content: str


class TurnContext(BaseModel):
    conversation_id: str
    mode: str = Field(description="raw: no summary yet, the messages verbatim; caught_up: the latest summary"
                                  " and the messages after it; fallback: a newer summary is still being written,"
                                  " so an older one and more messages are given")
    summary: str | None = Field(description="The rolling summary of the earlier conversation")
    summary_end_seq: int | None
    messages: list[ContextMessage] = Field(description="The messages after the summary, verbatim")
    memories: str = Field(description="Relevant facts and memories, one line each, within the token budget")
    active_topic: str | None = Field(description="What the conversation is currently about: title and summary")
    last_seq: int


def _hit(item: dict) -> Hit:
    return Hit(id=item["id"], kind=item["kind"], content=item["content"], line=item["line"],
               category=item.get("category"), conversation_id=item.get("conversation_id"),
               occurred_start=item.get("occurred_start"), occurred_end=item.get("occurred_end"),
               score=Score(**{k: item["score"][k] for k in Score.model_fields}))


def compact(result: BaseModel, *, keep: Callable[[dict], None] | None = None) -> CallToolResult:
    """The tool's answer without empty fields, as structured content and as one line of JSON text
    (the SDK's default text is indented JSON with every null: twice the tokens for an agent).
    `keep` puts back the nulls an earlier version of the output always had."""
    body = result.model_dump(mode="json", exclude_none=True)
    if keep is not None:
        keep(body)
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=body)


def memory_of(fact: dict) -> Memory:
    return Memory(memory_id=fact["fact_id"], content=fact["content"], category=fact["category"],
                  memory_type=fact["memory_type"], importance=fact["importance"], tags=fact["tags"] or [],
                  visibility=fact["visibility"], shared_by=None if fact["mine"] else fact["owner_user_id"],
                  subject_id=fact["subject_id"], updated=fact["updated_at"][:10], mine=fact["mine"],
                  updated_at=fact["updated_at"])


def _subject_always(body: dict) -> None:
    """Every memory names its subject_id, null for none, as the first version of list_memories did."""
    for memory in body["memories"]:
        memory.setdefault("subject_id", None)


def build_server(connection_for: Callable[[Context], Connection],
                 transport: httpx.AsyncBaseTransport | None = None) -> MCPServer:
    """The MCP server; `connection_for` says, per tool call, which key and user to call the API with."""
    server = MCPServer("memory-agent", title="Memory Agent", version="0.1.0", instructions=(
        "Long-term memory of past conversations. search_memory finds memories by meaning (not keywords);"
        " store_memory saves something worth remembering; get_turn_context gives what to prepend at the"
        " start of a turn of a conversation."))

    async def call(ctx: Context, work: Callable[[MemoryApi], Any]) -> Any:
        try:
            async with MemoryApi(connection_for(ctx), transport=transport) as api:
                return await work(api)
        except ApiError as exc:
            raise ToolError(f"memory API {'unreachable' if exc.status == 0 else exc.status}: {exc.message}") from None

    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    @server.tool(annotations=read_only)
    async def search_memory(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, max_length=8000, description="What to look for, in words")],
        kinds: Annotated[list[Kind] | None, Field(description="Only these kinds (default: all)")] = None,
        subject_id: Annotated[Identifier | None, Field(description="Only memory about this subject")] = None,
        since: Annotated[str | None, Field(description="ISO 8601: only what happened at or after")] = None,
        until: Annotated[str | None, Field(description="ISO 8601: only what happened at or before")] = None,
        k: Annotated[int, Field(ge=1, le=50, description="How many results")] = 10,
    ) -> SearchResult:
        """Search the user's long-term memory by meaning and keywords ("WiFi problem" finds "network
        configuration issue"): facts, summarized conversation chunks and past messages, best first,
        ranked by relevance x importance x recency. Reads only; changes nothing."""
        body = await call(ctx, lambda api: api.search(query, kinds=kinds, subject_id=subject_id, since=since,
                                                       until=until, k=k))
        return compact(SearchResult(query=body["query"], user_id=body["user_id"],
                                    items=[_hit(i) for i in body["items"]], matched=body["matched"],
                                    threshold=body["threshold"]))

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False))
    async def store_memory(
        ctx: Context,
        content: Annotated[str, Field(min_length=1, max_length=4000, description="The memory, a sentence or two")],
        category: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[\w .:/-]+$",
                                       description="A label, e.g. infrastructure, preference")] = "other",
        memory_type: Annotated[MemoryType, Field(description="What kind of memory it is: a decision, an insight, a"
                                                       " fact, a preference, a project, a conversation or general")
                               ] = "general",
        importance: Annotated[int, Field(ge=1, le=5, description="1 trivial .. 5 critical")] = 3,
        tags: Annotated[list[Annotated[str, Field(min_length=1, max_length=100)]],
                        Field(max_length=20, description="Topic tags")] = [],  # noqa: B006 - pydantic copies it
        visibility: Annotated[Literal["private", "shared"],
                              Field(description="shared: other users see it for the same subject")] = "private",
        subject_id: Annotated[Identifier | None, Field(description="Who or what it is about")] = None,
    ) -> StoredMemory:
        """Remember something. A near-identical memory is merged (importance bumped, tags joined)
        instead of stored twice."""
        body = await call(ctx, lambda api: api.store(content, category=category, memory_type=memory_type,
                                                      importance=importance, tags=list(tags), visibility=visibility,
                                                      subject_id=subject_id))
        return StoredMemory(event_id=body["event_id"], memory_id=body["stored_as"] or body["fact_id"],
                            outcome=body["outcome"] or "accepted")

    @server.tool(annotations=read_only)
    async def list_memories(
        ctx: Context,
        subject_id: Annotated[Identifier | None, Field(description="Only this subject (default: all)")] = None,
        include_superseded: Annotated[bool, Field(description="Also older versions of my memories")] = False,
    ) -> MemoryList:
        """List my memories (facts) and those others shared about the same subjects."""
        body = await call(ctx, lambda api: api.list_memories(subject_id=subject_id,
                                                              include_superseded=include_superseded))
        return compact(MemoryList(user_id=body["user_id"], memories=[memory_of(f) for f in body["facts"]]),
                       keep=_subject_always)

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True))
    async def forget_memory(
        ctx: Context,
        memory_id: Annotated[str, Field(min_length=1, max_length=200, description="A memory_id of mine")],
    ) -> Forgotten:
        """Delete one of my memories (hidden everywhere; the history is kept)."""
        body = await call(ctx, lambda api: api.forget(memory_id))
        return Forgotten(memory_id=body["fact_id"], event_id=body["event_id"], applied=body["projected"])

    @server.tool(annotations=read_only)
    async def get_turn_context(
        ctx: Context,
        conversation_id: Annotated[Identifier, Field(description="The conversation")],
        query: Annotated[str | None, Field(max_length=8000, description="The current message")] = None,
        before_seq: Annotated[int | None, Field(ge=0, description="The current message's seq")] = None,
        budget_tokens: Annotated[int, Field(ge=0, le=8000, description="Token budget for memories")] = 500,
    ) -> TurnContext:
        """What to prepend at the start of a turn: the rolling summary, the messages after it,
        relevant memories within the token budget and the active topic."""
        body = await call(ctx, lambda api: api.context(conversation_id, query=query, before_seq=before_seq,
                                                        budget_tokens=budget_tokens))
        summary, topic = body.get("summary"), body.get("active_topic")
        topic_text = None
        if topic:
            topic_text = " - ".join(part for part in (topic.get("title"), topic.get("summary")) if part) or None
        return TurnContext(
            conversation_id=body["conversation_id"], mode=body["mode"], summary=summary["text"] if summary else None,
            summary_end_seq=summary["end_seq"] if summary else None,
            messages=[ContextMessage(seq=m["seq"], role=m["role"], content=m["content"]) for m in body["messages"]],
            memories=(body.get("retrieved") or {}).get("text") or "", active_topic=topic_text,
            last_seq=body["watermark"]["last_seq"])

    return server


class KeyGate:
    """ASGI middleware of the HTTP transport: every request carries an API key the memory API
    accepts (checked there, the answer cached for `ttl_s`), else 401 before any MCP message."""

    def __init__(self, app: ASGIApp, api_url: str, *, ttl_s: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.app, self.api_url, self.ttl_s, self.transport = app, api_url, ttl_s, transport
        self._known: dict[bytes, float] = {}

    async def _valid(self, key: str) -> bool:
        digest = hashlib.sha256(key.encode()).digest()
        if self._known.get(digest, 0.0) > time.monotonic():
            return True
        async with httpx.AsyncClient(base_url=self.api_url, transport=self.transport, timeout=10) as http:
            response = await http.get("/v1/conversations", params={"limit": 1}, headers={"X-API-Key": key})
        if response.status_code == 200:
            self._known[digest] = time.monotonic() + self.ttl_s
            return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = request_key({k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]})
        try:
            valid = key is not None and await self._valid(key)
        except httpx.HTTPError as exc:
            await JSONResponse({"detail": f"the memory API is unreachable: {exc}"}, status_code=503)(scope, receive,
                                                                                                   send)
            return
        if not valid:
            await JSONResponse({"detail": "missing or unknown API key (X-API-Key or Authorization: Bearer)"},
                               status_code=401, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        await self.app(scope, receive, send)


def request_key(headers: Any) -> str | None:
    """The API key of an HTTP request: X-API-Key, or Authorization: Bearer KEY."""
    key = headers.get("x-api-key")
    if key:
        return key
    auth = headers.get("authorization") or ""
    return auth[7:].strip() or None if auth.lower().startswith("bearer ") else None


def stdio_connection(connection: Connection) -> Callable[[Context], Connection]:
    """Every call acts with the configured key and user."""
    return lambda ctx: connection


def http_connection(api_url: str, timeout_s: float = 30.0) -> Callable[[Context], Connection]:
    """Every call acts with the key and user of the HTTP request that carried it."""
    def connection(ctx: Context) -> Connection:
        headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        return Connection(api_url, request_key(headers), headers.get("x-user-id") or None, timeout_s)
    return connection


def http_app(api_url: str, *, path: str = "/mcp", timeout_s: float = 30.0, host: str = "127.0.0.1") -> ASGIApp:
    """The streamable HTTP app behind the key gate."""
    server = build_server(http_connection(api_url, timeout_s))
    return KeyGate(server.streamable_http_app(streamable_http_path=path, host=host), api_url)

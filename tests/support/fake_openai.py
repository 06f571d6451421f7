"""A real local HTTP server speaking the OpenAI API, with programmable failures, for tests.

    with FakeOpenAI(latency_s=0.3) as fake:          # or: async with FakeOpenAI() as fake
        settings = Settings(llm=fake.llm_settings(), embedding=fake.embedding_settings())
        fake.fail_next(2, status=500)                # then 429s, hangs, malformed answers
        ...
        assert fake.chat_requests[-1].user_content.startswith("Window:")

or take the `fake_openai` pytest fixture (a started server per test) from this module:
`pytest_plugins = ["tests.support.fake_openai"]` in a conftest, or import the fixture.
Endpoints: POST /v1/chat/completions (non-streaming), POST /v1/embeddings, GET /v1/models.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pytest
from aiohttp import web
from pydantic import SecretStr

from core.settings import EmbeddingSettings, LlmSettings

Endpoint = Literal["chat", "embeddings"]
MalformedKind = Literal[
    "non_json",  # chat: content is not JSON (fails JSON mode)
    "empty_content",  # chat: content ""
    "null_content",  # chat: content null
    "empty_choices",  # chat: "choices": []
    "missing_choices",  # chat: no "choices" key
    "not_json_body",  # any: HTTP 200 with a text/plain body
    "wrong_count",  # embeddings: one vector fewer than inputs
    "wrong_dimensions",  # embeddings: vectors one element short
]
_MESSAGE_LINE = re.compile(r"^\[\d+\] ")
_WORD = re.compile(r"[a-z0-9]+")


@dataclass
class RecordedRequest:
    """One request as the server received it (failed and hung attempts included)."""

    endpoint: Endpoint
    body: dict[str, Any]
    headers: dict[str, str]
    started_at: float
    finished_at: float | None = None

    @property
    def model(self) -> str:
        return self.body.get("model", "")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def system_content(self) -> str:
        return next((m.get("content") or "" for m in self.messages if m.get("role") == "system"), "")

    @property
    def user_content(self) -> str:
        """The last user message's content."""
        users = [m.get("content") or "" for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else ""

    @property
    def json_mode(self) -> bool:
        fmt = self.body.get("response_format") or {}
        return fmt.get("type") in {"json_object", "json_schema"}

    @property
    def inputs(self) -> list[str]:
        """Embedding inputs, always as a list."""
        value = self.body.get("input", [])
        return [value] if isinstance(value, str) else list(value)


@dataclass
class _Action:
    kind: Literal["fail", "hang", "malformed"]
    endpoint: Endpoint | None
    status: int = 500
    seconds: float = 0.0
    malformed: MalformedKind = "non_json"
    retry_after: float | None = None


def compact_summary(request: RecordedRequest, limit: int = 400) -> str:
    """Deterministic stand-in for a summary: the `[seq] role: text` lines sent, compacted."""
    lines = [ln.strip() for ln in request.user_content.splitlines()]
    picked = [ln for ln in lines if _MESSAGE_LINE.match(ln)] or [request.user_content]
    return ("FAKE SUMMARY: " + " | ".join(" ".join(ln.split()) for ln in picked))[:limit]


def hashed_embedding(text: str, dimensions: int) -> list[float]:
    """Deterministic bag-of-words vector: texts sharing words are similar, unit length."""
    vector = np.zeros(dimensions, dtype=np.float64)
    for token in _WORD.findall(text.lower()) or [text]:
        digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "little") % dimensions
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    norm = np.linalg.norm(vector)
    return (vector / norm if norm else vector).tolist()


@dataclass
class FakeOpenAI:
    """An OpenAI-compatible server on 127.0.0.1 (free port) in a background thread."""

    latency_s: float = 0.0  # added before every answer (and before every failure)
    api_key: str = "fake-key"
    require_api_key: bool = False  # if set, a wrong bearer token gets 401
    embedding_dimensions: int = 384  # unless the request asks for `dimensions`
    # JSON answers (JSON mode, or a prompt asking for JSON while one is programmed):
    # json_responder(request) if set, else json_response, else
    # {"summary": compact_summary(...), "facts": []}. Text: text_responder or compact_summary.
    json_response: dict[str, Any] | None = None
    json_responder: Callable[[RecordedRequest], dict[str, Any]] | None = None
    text_responder: Callable[[RecordedRequest], str] | None = None

    requests: list[RecordedRequest] = field(default_factory=list, init=False, repr=False)
    in_flight: int = field(default=0, init=False)
    max_in_flight: int = field(default=0, init=False)
    port: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._actions: list[_Action] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._holding = False
        self._permits = threading.Semaphore(0)

    # -- programming -------------------------------------------------------------------

    def fail_next(
        self,
        n: int = 1,
        status: int = 500,
        *,
        endpoint: Endpoint | None = None,
        retry_after: float | None = None,
    ) -> None:
        """The next `n` requests (of `endpoint`, or any) get HTTP `status` (500, 429, ...)."""
        self._queue(n, _Action("fail", endpoint, status=status, retry_after=retry_after))

    def hang_next(self, n: int = 1, seconds: float = 30.0, *, endpoint: Endpoint | None = None) -> None:
        """The next `n` requests wait `seconds` before answering (ended early by stop())."""
        self._queue(n, _Action("hang", endpoint, seconds=seconds))

    def malformed_next(
        self, n: int = 1, kind: MalformedKind = "non_json", *, endpoint: Endpoint | None = None
    ) -> None:
        """The next `n` requests get HTTP 200 with a malformed answer of this kind."""
        self._queue(n, _Action("malformed", endpoint, malformed=kind))

    def hold_chat(self) -> None:
        """From now on every chat answer waits for a `release()` (the test decides when)."""
        self._holding = True

    def release(self, n: int = 1) -> None:
        """Let `n` held chat answers (current or future) go."""
        for _ in range(n):
            self._permits.release()

    def reset(self) -> None:
        """Forget requests, pending actions, responders and the concurrency peak."""
        with self._lock:
            self._actions.clear()
            self.requests.clear()
            self.max_in_flight = self.in_flight
        self.json_response = self.json_responder = self.text_responder = None

    def _queue(self, n: int, action: _Action) -> None:
        with self._lock:
            self._actions.extend([action] * n)

    def _take_action(self, endpoint: Endpoint) -> _Action | None:
        with self._lock:
            for i, action in enumerate(self._actions):
                if action.endpoint in (None, endpoint):
                    return self._actions.pop(i)
        return None

    # -- observing ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """What an OpenAI client's base_url should be: http://127.0.0.1:PORT/v1."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.endpoint == "chat"]

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.endpoint == "embeddings"]

    def llm_settings(self, **overrides: Any) -> LlmSettings:
        """LlmSettings pointing at this server (fast backoff, short timeout for tests)."""
        values: dict[str, Any] = {
            "provider": "openai",
            "base_url": self.base_url,
            "api_key": SecretStr(self.api_key),
            "model": "fake-llm",
            "timeout_s": 5.0,
            "backoff_base_s": 0.01,
            "backoff_max_s": 0.1,
        }
        return LlmSettings(**(values | overrides))

    def embedding_settings(self, **overrides: Any) -> EmbeddingSettings:
        values: dict[str, Any] = {
            "provider": "openai",
            "base_url": self.base_url,
            "api_key": SecretStr(self.api_key),
            "model": "fake-embedding",
            "dimensions": self.embedding_dimensions,
            "timeout_s": 5.0,
        }
        return EmbeddingSettings(**(values | overrides))

    def env(self, *, llm: bool = True, embeddings: bool = False) -> dict[str, str]:
        """MEMORY_* variables pointing a subprocess's Settings at this server."""
        out: dict[str, str] = {}
        if llm:
            out |= {
                "MEMORY_LLM__PROVIDER": "openai",
                "MEMORY_LLM__BASE_URL": self.base_url,
                "MEMORY_LLM__API_KEY": self.api_key,
                "MEMORY_LLM__MODEL": "fake-llm",
            }
        if embeddings:
            out |= {
                "MEMORY_EMBEDDING__PROVIDER": "openai",
                "MEMORY_EMBEDDING__BASE_URL": self.base_url,
                "MEMORY_EMBEDDING__API_KEY": self.api_key,
                "MEMORY_EMBEDDING__MODEL": "fake-embedding",
                "MEMORY_EMBEDDING__DIMENSIONS": str(self.embedding_dimensions),
            }
        return out

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> "FakeOpenAI":
        if self._thread is not None:
            return self
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_site(sock))
            except BaseException as error:  # reported to start()'s caller
                failure.append(error)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name=f"fake-openai-{self.port}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise RuntimeError("fake OpenAI server failed to start") from failure[0]
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        future.result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = self._loop = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> "FakeOpenAI":
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    async def _start_site(self, sock: socket.socket) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def _shutdown(self) -> None:
        assert self._stopping is not None and self._runner is not None
        self._stopping.set()  # releases hung and slow handlers
        await self._runner.cleanup()

    # -- handlers ----------------------------------------------------------------------

    async def _pause(self, seconds: float) -> None:
        if seconds > 0:
            assert self._stopping is not None
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
            except asyncio.TimeoutError:
                pass

    async def _handle(
        self, request: web.Request, endpoint: Endpoint, answer: Callable[[RecordedRequest], dict]
    ) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "request body is not JSON")
        record = RecordedRequest(endpoint, body, dict(request.headers), time.monotonic())
        with self._lock:
            self.requests.append(record)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            action = self._take_action(endpoint)
            await self._pause(self.latency_s)
            if self.require_api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
                return _error(401, "invalid api key")
            if action is not None and action.kind == "hang":
                await self._pause(action.seconds)
            if action is not None and action.kind == "fail":
                headers = {} if action.retry_after is None else {"retry-after": str(action.retry_after)}
                return _error(action.status, f"scripted failure {action.status}", headers)
            if endpoint == "chat" and self._holding:
                await self._wait_for_release()
            if body.get("stream"):
                return _error(400, "the fake server does not stream")
            if action is not None and action.kind == "malformed":
                if action.malformed == "not_json_body":
                    return web.Response(status=200, text="<html>not json</html>", content_type="text/plain")
                return web.json_response(_malform(answer(record), action.malformed))
            return web.json_response(answer(record))
        finally:
            record.finished_at = time.monotonic()
            with self._lock:
                self.in_flight -= 1

    async def _wait_for_release(self) -> None:
        assert self._stopping is not None
        while not self._permits.acquire(timeout=0):
            if self._stopping.is_set():
                return
            await asyncio.sleep(0.01)

    async def _chat(self, request: web.Request) -> web.Response:
        return await self._handle(request, "chat", self._chat_answer)

    async def _embeddings(self, request: web.Request) -> web.Response:
        return await self._handle(request, "embeddings", self._embedding_answer)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                                        for m in ("fake-llm", "fake-embedding")]}
        )

    def _chat_answer(self, record: RecordedRequest) -> dict[str, Any]:
        # Like a model following its prompt: JSON in JSON mode, or when JSON is asked for
        # in the text (servers without response_format) and a JSON answer is programmed.
        programmed = self.json_response is not None or self.json_responder is not None
        asked = "json" in (record.system_content + record.user_content).lower()
        if record.json_mode or (programmed and asked):
            if self.json_responder is not None:
                content = json.dumps(self.json_responder(record))
            elif self.json_response is not None:
                content = json.dumps(self.json_response)
            else:
                content = json.dumps({"summary": compact_summary(record), "facts": []})
        else:
            content = (self.text_responder or compact_summary)(record)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in record.messages)
        completion_tokens = len(content.split())
        return {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": record.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _embedding_answer(self, record: RecordedRequest) -> dict[str, Any]:
        dimensions = int(record.body.get("dimensions") or self.embedding_dimensions)
        base64_format = record.body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(record.inputs):
            vector = hashed_embedding(text, dimensions)
            encoded: Any = (
                base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode()
                if base64_format
                else vector
            )
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(t.split()) for t in record.inputs)
        return {
            "object": "list",
            "data": data,
            "model": record.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    kind = "rate_limit_exceeded" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": None}},
        status=status,
        headers=headers,
    )


def _malform(answer: dict[str, Any], kind: MalformedKind) -> dict[str, Any]:
    answer = json.loads(json.dumps(answer))
    if kind == "missing_choices":
        answer.pop("choices", None)
    elif kind == "empty_choices":
        answer["choices"] = []
    elif kind in ("non_json", "empty_content", "null_content") and answer.get("choices"):
        content = {"non_json": "Sure! Here is the summary: {not json", "empty_content": "",
                   "null_content": None}[kind]
        answer["choices"][0]["message"]["content"] = content
    elif kind == "wrong_count" and answer.get("data"):
        answer["data"] = answer["data"][:-1]
    elif kind == "wrong_dimensions" and answer.get("data"):
        for item in answer["data"]:
            if isinstance(item["embedding"], list):
                item["embedding"] = item["embedding"][:-1]
    return answer


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started fake OpenAI server, stopped after the test."""
    with FakeOpenAI() as server:
        yield server

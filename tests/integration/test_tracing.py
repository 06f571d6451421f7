"""OpenTelemetry traces on the real stack, received by a real OTLP/HTTP endpoint: the API (in this
process) and a worker process export protobuf to a small server here, which decodes it with
opentelemetry-proto. Asserted: the spans a user wants, their parentage across the Kafka hop
(the append's context in the record headers), and that no id or content leaves in a trace."""

from __future__ import annotations

import gzip
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from core import telemetry
from core.settings import TelemetrySettings
from tests.integration.conftest import running_api, wait_until, worker_process
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict
    links: tuple[str, ...]  # linked span ids
    service: str
    start: int  # ns since the epoch


class OtlpReceiver:
    """POST /v1/traces (OTLP/HTTP, protobuf): every request's raw body and its decoded spans."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf"
                if ok:
                    receiver.take(body)
                self.send_response(200 if ok else 400)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append(Span(
                        s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.kind,
                        {a.key: _value(a.value) for a in s.attributes}, tuple(link.span_id.hex() for link in s.links),
                        resource.get("service.name", ""), s.start_time_unix_nano))
        with self.lock:
            self.bodies.append(body)
            self.spans.extend(spans)

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name]

    def __enter__(self) -> "OtlpReceiver":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(value) -> object:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as server:
        yield server


def by_id(spans: list[Span]) -> dict[str, Span]:
    return {s.span_id: s for s in spans}


def ancestry(span: Span, index: dict[str, Span]) -> list[str]:
    """The names from `span` up to its trace's root (within what was received)."""
    names = [span.name]
    while span.parent_id in index:
        span = index[span.parent_id]
        names.append(span.name)
    return names


async def test_a_message_and_a_context_read_traced_end_to_end_without_content(settings, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # export every 0.2 s (the API in this process)
    settings = settings.model_copy(update={"telemetry": TelemetrySettings(enabled=True, endpoint=receiver.url)})
    conversation, user = f"conv-{uuid.uuid4().hex[:12]}", f"user-{uuid.uuid4().hex[:12]}"
    secret = f"quokka{uuid.uuid4().hex[:8]}"  # in every message and the query: must not leave in a trace
    query = f"what about the {secret} plan"
    # The chat service's own trace: each POST carries a traceparent, its span id is the parent.
    callers = {seq: (uuid.uuid4().hex, uuid.uuid4().hex[:16]) for seq in range(7)}
    with FakeOpenAI() as llm:
        llm_env = {"MEMORY_LLM__PROVIDER": "openai", "MEMORY_LLM__BASE_URL": llm.base_url,
                   "MEMORY_LLM__API_KEY": llm.api_key, "MEMORY_LLM__MODEL": "fake-llm",
                   "MEMORY_TELEMETRY__ENABLED": "true", "MEMORY_TELEMETRY__ENDPOINT": receiver.url,
                   "OTEL_BSP_SCHEDULE_DELAY": "200"}
        async with worker_process(settings, extra_env=llm_env, log_name="tracing-worker") as worker, \
                running_api(settings) as api:
            assert telemetry.enabled()
            async with httpx.AsyncClient(base_url=api, headers={"X-API-Key": "key-a"}, timeout=30) as http:
                for seq, (trace_id, span_id) in callers.items():
                    answer = await http.post(
                        f"/v1/conversations/{conversation}/messages",
                        headers={"traceparent": f"00-{trace_id}-{span_id}-01"},
                        json={"user_id": user, "seq": seq, "role": "user" if seq % 2 == 0 else "assistant",
                              "content": f"message {seq} about the {secret} plan for the garden"})
                    assert answer.status_code == 202, answer.text

                async def summarized() -> bool:  # the window's summary: an LLM call in the worker
                    got = await http.get(f"/v1/conversations/{conversation}/context", params={"min_seq": 6},
                                         headers={"X-User-Id": user})
                    return got.status_code == 200 and got.json()["summary"] is not None
                await wait_until(summarized, 180, f"a summary (worker log {worker.log_path})")
                context = await http.get(f"/v1/conversations/{conversation}/context",
                                         params={"query": query}, headers={"X-User-Id": user})
                assert context.status_code == 200

            async def traced() -> bool:
                names = {s.name for s in receiver.spans}
                return {"llm chat", "project messages", "retrieval pack", "fold window",
                        "process-conversation summary.completed"} <= names
            await wait_until(traced, 120, "the spans exported")

    index = by_id(receiver.spans)
    # The HTTP request of the API: named by its route template, never the path as sent.
    posts = receiver.named("POST /v1/conversations/{conversation_id}/messages")
    assert len(posts) == 7 and all(s.attributes["http.route"] == "/v1/conversations/{conversation_id}/messages"
                                   and s.attributes["http.response.status_code"] == 202 for s in posts)
    assert {(s.trace_id, s.parent_id) for s in posts} == set(callers.values())  # the caller's trace goes on
    # The append: a producer span under the request; the worker's processing of the record is its child
    # across the Kafka hop (the record's traceparent header), in the worker's own service.
    appends = [s for s in receiver.named("append") if s.parent_id in {p.span_id for p in posts}]
    assert len(appends) == 7 and all(s.service == "memory-agent-api" for s in appends)
    processed = [s for s in receiver.named("process-conversation message.appended")
                 if s.parent_id in {a.span_id for a in appends}]
    assert len(processed) == 7 and all(s.service == "memory-agent-worker" for s in processed)
    assert {s.trace_id for s in processed} == {trace_id for trace_id, _ in callers.values()}
    folds = [s for s in receiver.named("fold window") if s.parent_id in {p.span_id for p in processed}]
    assert len(folds) == 7
    # The summary requested by one message's fold: its stage, the LLM call, and the fold of the result
    # all join that message's trace (the request and the result carry the context on).
    paths = [ancestry(call, index) for call in receiver.named("llm chat")]
    assert ["llm chat", "stage summarize-windows", "process-conversation message.appended", "append",
            "POST /v1/conversations/{conversation_id}/messages"] in paths, paths
    call = next(c for c in receiver.named("llm chat") if len(ancestry(c, index)) == 5)
    results = [s for s in receiver.named("process-conversation summary.completed") if s.trace_id == call.trace_id]
    assert results and ancestry(results[0], index)[1] == "stage summarize-windows"
    # A projector's batch spans many messages' traces: linked to them, not the child of one.
    projected = receiver.named("project messages")
    assert projected and {link for s in projected for link in s.links} & {a.span_id for a in appends}

    # The context read: the request, the read itself, retrieval (its search), the query's
    # embedding, packing and the topic section, in one trace.
    get = max(receiver.named("GET /v1/conversations/{conversation_id}/context"), key=lambda s: s.start)
    read = {s.name: s for s in receiver.spans if s.trace_id == get.trace_id}
    assert ancestry(read["retrieval pack"], index) == ["retrieval pack", "context retrieval", "context", get.name]
    assert ancestry(read["context topic"], index) == ["context topic", "context", get.name]
    # The current message's embedding starts with the read, before the search (api/turn_context.py).
    assert "embedding query" in read and ancestry(read["embedding query"], index) == ["embedding query", "context",
                                                                                        get.name]

    # Nothing a user wrote or is known by leaves in a trace: not in a name, an attribute, a resource.
    assert receiver.bodies
    for body in receiver.bodies:
        for needle in (secret, conversation, user, "tenant-a", "key-a"):
            assert needle.encode() not in body, needle
    assert all("?" not in s.name and "min_seq" not in json.dumps(s.attributes, default=str) for s in receiver.spans)
    assert not telemetry.enabled()  # the API's shutdown took its tracer down (nothing left on for other tests)

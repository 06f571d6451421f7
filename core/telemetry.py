"""OpenTelemetry traces, off by default: spans and Kafka-header propagation that cost one check when off.

`configure` (the API's app, the worker) installs a tracer exporting over OTLP/HTTP when
MEMORY_TELEMETRY__ENABLED is set; until then `span` hands back one shared no-op context and
the header helpers return at once. What a span may carry (docs/observability.md): names,
route templates, event types, counts, partitions and offsets; never an id of a tenant, user or
conversation, a query or any content (the access log's rule, docs/security.md). An exception
is recorded by its class name only: its message may quote what a user wrote.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from core.settings import Settings

_OFF = contextlib.nullcontext()  # what `span` hands back when tracing is off (reusable, no state)
_tracer: Any = None  # set by configure(): None is off
_propagator: Any = None
MAX_LINKS = 32  # a batch span links this many of its records' traces at most

Attributes = dict[str, str | int | float | bool]
T = TypeVar("T")


def enabled() -> bool:
    return _tracer is not None


def wanted(settings: Settings) -> bool:
    """Tracing asked for by the settings and not switched off by the standard OTEL_SDK_DISABLED."""
    return settings.telemetry.enabled and os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"


def configure(settings: Settings, component: str) -> Callable[[], None] | None:
    """Install the process's tracer when the settings ask for it; returns the shutdown that
    flushes what is queued (None when tracing stays off). `component`: api, worker, ..."""
    global _tracer, _propagator
    if not wanted(settings):
        return None
    if _tracer is not None:  # one tracer per process (an app built twice in one process)
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased  # noqa: PLC0415
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: PLC0415
    except ImportError as error:
        raise RuntimeError("MEMORY_TELEMETRY__ENABLED needs the OpenTelemetry SDK and OTLP exporter:"
                           " pip install 'memory-agent[otel]'") from error
    config = settings.telemetry
    # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME are read by Resource.create; ours come first
    # only where the variables say nothing.
    defaults = {"service.name": config.service_name or f"memory-agent-{component}",
                "service.namespace": "memory-agent", "deployment.environment.name": settings.environment,
                "memory_agent.generation": settings.generation, "memory_agent.component": component}
    if config.service_name is None and os.environ.get("OTEL_SERVICE_NAME"):
        defaults.pop("service.name")
    resource = Resource.create(defaults)
    sampler = None if config.sample_ratio is None else ParentBased(TraceIdRatioBased(config.sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)  # sampler None: OTEL_TRACES_SAMPLER
    # endpoint None: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT(/v1/traces), or localhost:4318
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.endpoint)))
    _tracer, _propagator = provider.get_tracer("memory_agent"), TraceContextTextMapPropagator()

    def shutdown() -> None:
        global _tracer
        _tracer = None
        provider.shutdown()  # flushes the queued spans
    return shutdown


def span(name: str, attributes: Attributes | None = None, *, kind: str = "internal", parent: Any = None,
         links: Sequence[Any] = ()) -> contextlib.AbstractContextManager:
    """A span around the block, current inside it; the shared no-op context when off.
    `kind`: internal, server, client, producer or consumer; `parent`: a context from
    `context_of` (default: the current span); `links`: contexts from `links_of`."""
    if _tracer is None:
        return _OFF
    return _recording(name, attributes, kind, parent, links)


@contextlib.contextmanager
def _recording(name: str, attributes: Attributes | None, kind: str, parent: Any, links: Sequence[Any]) -> Iterator[Any]:
    from opentelemetry.trace import SpanKind, Status, StatusCode  # noqa: PLC0415 - only when on

    with _tracer.start_as_current_span(name, context=parent, kind=SpanKind[kind.upper()], attributes=attributes,
                                       links=links, record_exception=False,
                                       set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as error:
            # The class only: an exception's message may quote content (no record_exception).
            current.set_attribute("error.type", type(error).__qualname__)
            current.set_status(Status(StatusCode.ERROR, type(error).__qualname__))
            raise


async def traced(name: str, awaitable: Awaitable[T], attributes: Attributes | None = None) -> T:
    """`await awaitable` inside a span (just the await when off)."""
    if _tracer is None:
        return await awaitable
    with _recording(name, attributes, "internal", None, ()):
        return await awaitable


def batch_span(name: str, records: Sequence[Any], attributes: Attributes | None = None
               ) -> contextlib.AbstractContextManager:
    """A consumer span over a batch of Kafka records (`.headers`), linked to their traces; a
    batch of one record is the child of its trace instead."""
    if _tracer is None:
        return _OFF
    values: Attributes = {"messaging.system": "kafka", "messaging.batch.message_count": len(records),
                          **(attributes or {})}
    if len(records) == 1:
        return _recording(name, values, "consumer", context_of(records[0].headers), ())
    return _recording(name, values, "consumer", None, links_of(r.headers for r in records))


def set_attributes(values: Attributes) -> None:
    """Attributes on the current span (a status code known at the end); nothing when off."""
    if _tracer is None:
        return
    from opentelemetry import trace  # noqa: PLC0415

    trace.get_current_span().set_attributes(values)


def headers(existing: Sequence[tuple[str, bytes]] | None = None) -> list[tuple[str, bytes]] | None:
    """Kafka record headers carrying the current span's context (W3C traceparent), added to
    `existing`; `existing` itself when off or outside a span."""
    if _tracer is None:
        return existing
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    if not carrier:
        return existing
    kept = [(k, v) for k, v in existing or () if k not in carrier]
    return kept + [(k, v.encode("ascii")) for k, v in carrier.items()]


def http_context(header_pairs: Iterable[tuple[bytes, bytes]]) -> Any:
    """The trace context an HTTP request's traceparent/tracestate headers carry (ASGI pairs)."""
    if _tracer is None:
        return None
    carrier = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in header_pairs
               if k.lower() in (b"traceparent", b"tracestate")}
    return _propagator.extract(carrier) if carrier else None


def context_of(record_headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None) -> Any:
    """The trace context a Kafka record's headers carry; None when they carry none (or off)."""
    if _tracer is None or not record_headers:
        return None
    pairs = record_headers.items() if isinstance(record_headers, Mapping) else record_headers
    carrier = {k: v.decode("ascii", "replace") for k, v in pairs
               if k in ("traceparent", "tracestate") and isinstance(v, bytes | bytearray)}
    return _propagator.extract(carrier) if carrier else None


def links_of(many_headers: Iterable[Iterable[tuple[str, bytes]] | None]) -> list[Any]:
    """Links to the traces of a batch's records (at most MAX_LINKS, distinct): a batch spans
    many traces, so it is linked to them rather than made the child of one."""
    if _tracer is None:
        return []
    from opentelemetry import trace  # noqa: PLC0415

    links, seen = [], set()
    for record_headers in many_headers:
        found = context_of(record_headers)
        if found is None:
            continue
        context = trace.get_current_span(found).get_span_context()
        if context.is_valid and (context.trace_id, context.span_id) not in seen:
            seen.add((context.trace_id, context.span_id))
            links.append(trace.Link(context))
            if len(links) == MAX_LINKS:
                break
    return links

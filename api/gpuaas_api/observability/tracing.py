"""OpenTelemetry tracing, off unless an exporter is configured (trace_exporter, or otlp_endpoint /
OTEL_EXPORTER_OTLP_ENDPOINT). Off, nothing here starts a span: the API's middleware skips tracing
and the worker's spans are the API's no-op spans.

One trace runs from a request to the run it caused: the request's span (SERVER, continuing an
incoming W3C `traceparent` header) is current while the handler runs; accepting an operation records
its trace id and traceparent on the operation row (columns trace_id, trace_parent); the worker that
claims it starts the operation's span as a child of that request span, with spans for preparing,
running and recording under it.

This module keeps its own tracer provider instead of OpenTelemetry's process-global one (which can
be set only once per process), so tests install an in-memory exporter and take it away again.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)
INSTRUMENTATION = "gpuaas_api"
_propagator = TraceContextTextMapPropagator()
_provider = None  # opentelemetry.sdk.trace.TracerProvider while tracing is on
_tracer: trace.Tracer = trace.NoOpTracer()


def enabled() -> bool:
    return _provider is not None


def tracer() -> trace.Tracer:
    return _tracer


def install(exporter, *, service_name: str, batch: bool = True) -> None:
    """Trace to `exporter` (any SpanExporter) from now on; replaces an earlier install."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    global _provider, _tracer
    uninstall()
    # Resource.create also reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; the latter wins over ours.
    ours = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(ours))
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    _provider, _tracer = provider, provider.get_tracer(INSTRUMENTATION)


def uninstall() -> None:
    """Flush and stop tracing (spans started afterwards are no-ops)."""
    global _provider, _tracer
    provider, _provider, _tracer = _provider, None, trace.NoOpTracer()
    if provider is not None:
        provider.shutdown()


def configure(exporter: str | None, endpoint: str | None, *, service_name: str) -> str | None:
    """From the settings: `exporter` otlp | console | none, or unset (otlp when `endpoint` is set,
    else off). `endpoint` is the collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is
    (http://collector:4318); spans go to <endpoint>/v1/traces over OTLP/HTTP. Returns what it chose."""
    choice = exporter or ("otlp" if endpoint else "none")
    if choice == "none":
        uninstall()
        return None
    if choice == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        install(ConsoleSpanExporter(), service_name=service_name)
    elif choice == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # Without an endpoint the exporter reads OTEL_EXPORTER_OTLP(_TRACES)_ENDPOINT, else localhost:4318.
        target = f"{endpoint.rstrip('/')}/v1/traces" if endpoint else None
        install(OTLPSpanExporter(endpoint=target), service_name=service_name)
    else:
        raise ValueError(f"unknown trace exporter {choice!r} (otlp, console or none)")
    log.info("tracing on: %s exporter%s", choice, f" to {endpoint}" if endpoint and choice == "otlp" else "")
    return choice


def extract(headers: Mapping[str, str]) -> otel_context.Context:
    """The context an incoming `traceparent` header names (an empty one without it)."""
    return _propagator.extract(headers)


def current_trace() -> tuple[str | None, str | None]:
    """(trace id as 32 hex digits, W3C traceparent) of the current span, or (None, None) when no
    span is recording (tracing off)."""
    span = trace.get_current_span()
    ctx = span.get_span_context()
    if not ctx.is_valid or not span.is_recording():
        return None, None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return trace.format_trace_id(ctx.trace_id), carrier.get("traceparent")


@contextlib.contextmanager
def operation_span(op: Mapping[str, Any], start_time: int | None = None) -> Iterator[trace.Span]:
    """The worker's span for one attempt of `op`, a child of the request span that accepted it when
    the operation recorded one. `start_time` (ns since the epoch): when the claim began."""
    parent = _propagator.extract({"traceparent": op["trace_parent"]}) if op.get("trace_parent") else None
    attributes = {"gpuaas.operation.id": str(op["id"]), "gpuaas.operation.kind": op["kind"],
                  "gpuaas.operation.attempt": op["attempt"], "gpuaas.instance.id": str(op["instance_id"]),
                  "gpuaas.project.id": str(op["project_id"]), "gpuaas.tenant.id": str(op["tenant_id"]),
                  "gpuaas.correlation_id": op["correlation_id"]}
    with _tracer.start_as_current_span(f"operation {op['kind']}", context=parent, kind=trace.SpanKind.CONSUMER,
                                       attributes=attributes, start_time=start_time) as span:
        yield span


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[trace.Span]:
    """A child span of the current one (a no-op span while tracing is off)."""
    with _tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current

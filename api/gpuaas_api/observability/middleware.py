"""One pure ASGI middleware for what the API tells about each request: the access log line, the
latency histogram and (when tracing is on) the request's span. It sits inside the correlation
middleware, so the correlation id is bound for all three."""

from __future__ import annotations

import logging
import time

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from . import logs, metrics, tracing

access_log = logging.getLogger("gpuaas_api.access")


def route_of(scope: dict) -> str:
    """The route template the router matched (FastAPI puts the route on the scope), never the raw path."""
    return getattr(scope.get("route"), "path", None) or metrics.UNMATCHED


class ObservabilityMiddleware:
    def __init__(self, app, *, metrics_enabled: bool = True):
        self.app = app
        self.metrics_enabled = metrics_enabled

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method = scope["method"]
        status = 500  # what an exception that escapes the app becomes (the correlation middleware answers it)
        scope_token = logs.bind_request(scope)
        span = context_token = None
        if tracing.enabled():
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())
                       if k in (b"traceparent", b"tracestate")}
            parent = tracing.extract(headers)
            span = tracing.tracer().start_span(method, context=parent, kind=SpanKind.SERVER, attributes={
                "http.request.method": method, "url.path": scope["path"], "url.scheme": scope.get("scheme", "http")})
            context_token = otel_context.attach(trace.set_span_in_context(span, parent))

        async def send_and_watch(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            seconds = time.perf_counter() - started
            route = route_of(scope)
            if self.metrics_enabled:
                metrics.REQUEST_SECONDS.labels(route, method, str(status)).observe(seconds)
            if span is not None:
                span.update_name(f"{method} {route}")
                span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                span.end()
                otel_context.detach(context_token)
            if access_log.isEnabledFor(logging.INFO):
                client = scope.get("client")
                access_log.info("%s %s %d %.1f ms", method, scope["path"], status, seconds * 1000, extra={
                    "http_method": method, "http_route": route, "http_path": scope["path"], "http_status": status,
                    "duration_ms": round(seconds * 1000, 3), "client": client[0] if client else None})
            logs.unbind_request(scope_token)

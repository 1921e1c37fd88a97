"""Logs, metrics and traces of the control service (docs/observability.md).

- logs: JSON lines with the correlation id and the ids of what a line is about (python-json-logger);
- metrics: Prometheus families for requests, the queue, operations, workers and run events;
- tracing: OpenTelemetry spans from a request to the run it caused, off unless configured;
- middleware: the API's per-request access line, latency and span.

`setup()` is what every `gpuaas` command runs before its work.
"""

from __future__ import annotations

# Commands whose logs are JSON lines unless log_format says otherwise: the long-running services.
SERVICES = frozenset({"serve", "worker"})


def setup(settings, command: str, level: str) -> None:
    """Logging at `level` in the configured format, and tracing when an exporter is configured."""
    from . import logs, tracing

    fmt = settings.log_format or ("json" if command in SERVICES else "text")
    logs.configure(level, fmt)
    tracing.configure(settings.trace_exporter, settings.otlp_endpoint, service_name=f"gpuaas-{command}")

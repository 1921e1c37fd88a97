"""Prometheus metrics (prometheus_client). Each process exposes its own: `serve` on GET /metrics of
the API, a worker on its own port when worker_metrics_port is set. Counters and histograms live in
the process's default registry; the queue's depth is read from the database when /metrics is scraped
(one indexed query over the unfinished operations), so any number of API processes report the same
queue.

Families (see docs/observability.md):
- gpuaas_http_request_duration_seconds{route,method,status}: route is the template
  (/v1/instances/{instance_id}), never the raw path, so the label set stays bounded;
- gpuaas_operation_queue_depth{state}, gpuaas_operation_queue_oldest_age_seconds{state},
  gpuaas_operation_leases_expired, gpuaas_database_up: read at scrape time;
- gpuaas_operation_duration_seconds{kind,result}: claim to recorded outcome, per attempt;
- gpuaas_worker_heartbeats_total{worker,source}, gpuaas_worker_last_heartbeat_timestamp_seconds{worker};
- gpuaas_events_ingested_total{type}: run events written to instance timelines.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Iterable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)
CONTENT_TYPE = CONTENT_TYPE_LATEST
QUEUE_STATES = ("queued", "running")
# What a request's route label is when no route matched (404s of unknown paths, methods).
UNMATCHED = "<unmatched>"

REQUEST_SECONDS = Histogram(
    "gpuaas_http_request_duration_seconds",
    "API request latency, from the request's arrival to the end of its response, by route template, "
    "method and status (an event stream counts the whole time it stays open)",
    ["route", "method", "status"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120))
OPERATION_SECONDS = Histogram(
    "gpuaas_operation_duration_seconds",
    "One attempt of an operation, from its claim to its recorded outcome, by kind and result "
    "(succeeded, failed, canceled; lost when another worker took the lease over)",
    ["kind", "result"],
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200))
WORKER_HEARTBEATS = Counter(
    "gpuaas_worker_heartbeats",
    "A worker's signs of life: source=lease for each lease extension of a running operation, "
    "source=loop for each pass of an idle claim loop (at least every poll_seconds)",
    ["worker", "source"])
WORKER_LAST_HEARTBEAT = Gauge(
    "gpuaas_worker_last_heartbeat_timestamp_seconds",
    "Unix time of the worker's last heartbeat of either source", ["worker"])
HEALTH_CHECK_SECONDS = Histogram(
    "gpuaas_health_check_duration_seconds",
    "One health check of an instance, from its claim to its recorded verdict, by what it read "
    "(healthy; degraded: a member failed; down: the control plane did not answer; skipped: nothing to run)",
    ["result"],
    buckets=(0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60))
EVENTS_INGESTED = Counter(
    "gpuaas_events_ingested",
    "Run events (ansible-runner's, summarized) written to instance timelines, by event type", ["type"])


def heartbeat(worker: str, source: str) -> None:
    WORKER_HEARTBEATS.labels(worker, source).inc()
    WORKER_LAST_HEARTBEAT.labels(worker).set(time.time())


def operation_finished(kind: str, result: str, seconds: float) -> None:
    OPERATION_SECONDS.labels(kind, result).observe(seconds)


def health_checked(result: str, seconds: float) -> None:
    HEALTH_CHECK_SECONDS.labels(result).observe(seconds)


def events_ingested(types: Iterable[str]) -> None:
    for event_type in types:
        EVENTS_INGESTED.labels(event_type).inc()


class QueueCollector:
    """The operations queue as it is in the database at scrape time. The query reads only unfinished
    operations through the partial index operations_open. A database that does not answer yields
    gpuaas_database_up 0 and no queue figures, rather than a failed scrape."""

    QUERY = """SELECT status, count(*) AS n,
                      coalesce(extract(epoch FROM now() - min(created_at)), 0) AS oldest,
                      count(*) FILTER (WHERE status = 'running' AND lease_expires_at < now()) AS expired
                 FROM operations WHERE status IN ('queued', 'running') GROUP BY status"""

    def __init__(self, database):
        self.db = database

    def collect(self):
        up = GaugeMetricFamily("gpuaas_database_up", "1 when the database answered this scrape's query, else 0")
        try:
            with self.db.transaction(timeout=2.0) as conn:
                rows = {r["status"]: r for r in conn.execute(self.QUERY).fetchall()}
        except Exception as exc:  # noqa: BLE001 - a scrape reports the outage, it does not fail
            log.warning("metrics: the queue could not be read (%s)", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        depth = GaugeMetricFamily("gpuaas_operation_queue_depth", "Operations by state: queued (waiting for a "
                                  "worker or behind another operation of their instance) and running", labels=["state"])
        oldest = GaugeMetricFamily("gpuaas_operation_queue_oldest_age_seconds", "Age of the oldest operation in "
                                   "each state (since it was accepted), 0 when there is none", labels=["state"])
        for state in QUEUE_STATES:
            row = rows.get(state)
            depth.add_metric([state], row["n"] if row else 0)
            oldest.add_metric([state], float(row["oldest"]) if row else 0.0)
        expired = GaugeMetricFamily("gpuaas_operation_leases_expired", "Running operations whose worker lease has "
                                    "expired and that no worker has recovered yet")
        expired.add_metric([], rows["running"]["expired"] if "running" in rows else 0)
        yield from (depth, oldest, expired)


def exposition(database=None) -> bytes:
    """This process's metrics in the Prometheus text format, and the queue's when `database` is given."""
    out = generate_latest(REGISTRY)
    if database is not None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(QueueCollector(database))
        out += generate_latest(registry)
    return out


def parse_networks(value: str | Iterable[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    items = value.split(",") if isinstance(value, str) else value
    return tuple(ipaddress.ip_network(item.strip(), strict=False) for item in items if item.strip())


def allowed(client: str | None, networks: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    """Whether a scrape from `client` (the peer address uvicorn reports) may read /metrics."""
    try:
        address = ipaddress.ip_address(client or "")
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return any(address in net for net in networks)


def start_http_server(port: int, host: str) -> tuple[object, object]:
    """A worker's own /metrics (prometheus_client's server, in a daemon thread): (server, thread). A
    port it cannot listen on is a ConfigError that names the setting."""
    from ..config import ConfigError

    try:
        server, thread = _start_http_server(port, addr=host)
    except OSError as exc:
        raise ConfigError(f"invalid setting GPUAAS_WORKER_METRICS_PORT (worker_metrics_port): cannot listen on "
                          f"{host}:{port} ({exc.strerror})") from None
    log.info("metrics on http://%s:%d/metrics", host, server.server_port)
    return server, thread

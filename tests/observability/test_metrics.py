"""GET /metrics of the API after real requests and a real operation (the test app's deploy, run by an
in-process worker), read over loopback HTTP as Prometheus would, with the values checked against what
happened: the request histogram by route template, the queue read from the database at scrape time,
the operation's duration by kind and result, the worker's heartbeats and the run events ingested.
Counters and histograms live in the process's registry, which earlier tests share: the checks read
the change across this test."""

from __future__ import annotations

import socket
import time
import uuid

import httpx
from fastapi.testclient import TestClient
from gpuaas_api import db as dbmod
from gpuaas_api.app import create_app
from gpuaas_api.config import Settings
from gpuaas_api.observability.metrics import QueueCollector
from operations.helpers import make_instance, serving, wait_op
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

SA = "service_account"
FAMILIES = ("gpuaas_http_request_duration_seconds", "gpuaas_operation_queue_depth",
            "gpuaas_operation_queue_oldest_age_seconds", "gpuaas_operation_leases_expired", "gpuaas_database_up",
            "gpuaas_operation_duration_seconds", "gpuaas_worker_heartbeats",
            "gpuaas_worker_last_heartbeat_timestamp_seconds", "gpuaas_events_ingested")


def scrape(url: str) -> dict[str, dict[tuple, float]]:
    """{family: {(sample name, sorted labels): value}} from the API's /metrics."""
    r = httpx.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(r.text):
        out[family.name] = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
    return out


def value(metrics: dict, family: str, sample: str, **labels) -> float:
    return metrics.get(family, {}).get((sample, tuple(sorted(labels.items()))), 0.0)


def test_each_family_has_real_values_after_real_requests_and_an_operation(ops, app):
    instance, _ = make_instance(ops, "measured")
    with serving(app) as url:
        before = scrape(url)
        assert not [f for f in FAMILIES if f not in before], sorted(before)
        for _ in range(3):
            ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200)
        ops.w.call(SA, "GET", f"/v1/instances/{uuid.uuid4()}", 404)
        assert ops.w.client.get("/no/such/path").status_code == 404
        op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
        queued = scrape(url)

        worker = ops.start_worker(name=f"measured-{uuid.uuid4().hex[:6]}")
        assert wait_op(ops, op["id"])["status"] == "succeeded"
        after = scrape(url)

    def delta(family, sample, **labels):
        return value(after, family, sample, **labels) - value(before, family, sample, **labels)

    # Requests, by route template: never the raw path.
    latency = "gpuaas_http_request_duration_seconds"
    route = "/v1/instances/{instance_id}"
    assert delta(latency, f"{latency}_count", route=route, method="GET", status="200") == 3
    assert delta(latency, f"{latency}_count", route=route, method="GET", status="404") == 1
    assert delta(latency, f"{latency}_sum", route=route, method="GET", status="200") > 0
    assert delta(latency, f"{latency}_count", route="<unmatched>", method="GET", status="404") == 1
    assert delta(latency, f"{latency}_count", route="/v1/instances/{instance_id}/deploy", method="POST",
                 status="202") == 1
    assert not [k for k in after[latency] if instance["id"] in str(k)]

    # The queue, read from the database at each scrape: the deploy waited, then ran and was done.
    depth = "gpuaas_operation_queue_depth"
    assert value(queued, depth, depth, state="queued") == 1 and value(queued, depth, depth, state="running") == 0
    oldest = "gpuaas_operation_queue_oldest_age_seconds"
    assert value(queued, oldest, oldest, state="queued") > 0
    assert value(after, depth, depth, state="queued") == 0 and value(after, depth, depth, state="running") == 0
    assert value(after, "gpuaas_database_up", "gpuaas_database_up") == 1
    assert value(after, "gpuaas_operation_leases_expired", "gpuaas_operation_leases_expired") == 0

    # The operation, its worker's heartbeats and the run's events.
    duration = "gpuaas_operation_duration_seconds"
    assert delta(duration, f"{duration}_count", kind="deploy", result="succeeded") == 1
    (row,) = ops.sql("SELECT extract(epoch FROM finished_at - claimed_at) AS s, trace_id FROM operations "
                     "WHERE id = %s", (op["id"],))
    measured = delta(duration, f"{duration}_sum", kind="deploy", result="succeeded")
    assert 0.5 * float(row["s"]) < measured < float(row["s"]) + 5
    assert row["trace_id"] is None  # tracing is off here
    beats = "gpuaas_worker_heartbeats"
    assert value(after, beats, f"{beats}_total", worker=worker.name, source="loop") >= 1
    last = value(after, "gpuaas_worker_last_heartbeat_timestamp_seconds",
                 "gpuaas_worker_last_heartbeat_timestamp_seconds", worker=worker.name)
    assert time.time() - 60 < last <= time.time()
    ingested = "gpuaas_events_ingested"
    by_type = {dict(labels)["type"]: v - before.get(ingested, {}).get((name, labels), 0)
               for (name, labels), v in after[ingested].items() if name == f"{ingested}_total"}
    rows = ops.sql("""SELECT type, count(*) AS n FROM instance_events WHERE app_instance_id = %s
                       AND type LIKE 'run.%%' GROUP BY type""", (instance["id"],))
    assert {t: n for t, n in by_type.items() if n} == {r["type"]: r["n"] for r in rows}
    assert by_type["run.task_ok"] > 0

    assert "/metrics" not in ops.w.client.get("/openapi.json").json()["paths"]


def test_metrics_are_open_to_the_allowed_networks_only(database):
    closed = create_app(database, settings=Settings(metrics_allowed_networks=("10.0.0.0/8",)))
    with serving(closed) as url:
        refused = httpx.get(f"{url}/metrics")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert refused.json()["error"]["correlation_id"] == refused.headers["X-Correlation-ID"]
    off = create_app(database, settings=Settings(metrics_enabled=False))
    with TestClient(off) as client:
        assert client.get("/metrics").status_code == 404
        assert client.get("/healthz").status_code == 200


def test_a_database_that_does_not_answer_is_reported_not_a_failed_scrape():
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gone = dbmod.Database(f"host=127.0.0.1 port={port} dbname=none user=none connect_timeout=1", min_size=0,
                          max_size=1, timeout=1)
    gone.open()
    try:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(QueueCollector(gone))
        text = generate_latest(registry).decode()
    finally:
        gone.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [s.value for s in families["gpuaas_database_up"].samples] == [0]
    assert "gpuaas_operation_queue_depth" not in families

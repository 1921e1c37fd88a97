"""JSON-lines logs from real `gpuaas serve` and `gpuaas worker` processes: a request's lines carry its
correlation id and the ids in its path; a run's lines carry the operation's correlation id and its
operation, instance, project and tenant ids; the log level setting holds; and uvicorn's own lines
come in the same format."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from gpuaas_api.iam.service import bootstrap_platform_admin
from operations.helpers import make_instance, wait_for, wait_op
from prometheus_client.parser import text_string_to_metric_families

from .conftest import free_port, json_lines

CLI = [sys.executable, "-m", "gpuaas_api.cli"]
SA = "service_account"


def serve(db_url: str, log_path, **env) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(CLI + ["serve", "--port", str(port)], env=os.environ | {"DATABASE_URL": db_url} | env,
                            stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready():
        assert proc.poll() is None, log_path.read_text()
        try:
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False
    try:
        wait_for(ready, 60, 0.2, "gpuaas serve")
    except BaseException:
        proc.kill()
        raise
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    finally:
        proc.kill()


@pytest.fixture
def admin_token(database):
    with database.transaction() as conn:
        return bootstrap_platform_admin(conn, "logs@platform.example", 1)


def test_a_requests_log_lines_carry_its_correlation_id_and_ids(db_url, admin_token, tmp_path):
    proc, url = serve(db_url, tmp_path / "serve.log")
    cid, other_cid = f"logs-{uuid.uuid4().hex}", f"logs-{uuid.uuid4().hex}"
    auth = {"Authorization": f"Bearer {admin_token}"}
    missing = str(uuid.uuid4())
    try:
        tenant = httpx.post(f"{url}/v1/tenants", json={"name": "logged"}, headers=auth).json()
        created = httpx.post(f"{url}/v1/tenants/{tenant['id']}/projects", json={"name": "logged"},
                             headers=auth | {"X-Correlation-ID": cid})
        answer = httpx.get(f"{url}/v1/projects/{missing}", headers=auth | {"X-Correlation-ID": other_cid})
    finally:
        stop(proc)
    assert created.status_code == 201
    # The triage path: the error envelope names the correlation id; the log lines with it follow.
    assert answer.status_code == 404 and answer.json()["error"]["correlation_id"] == other_cid
    records = json_lines(tmp_path / "serve.log")  # every line is JSON, uvicorn's included
    assert {"time", "level", "logger", "message"} <= set(records[0])
    assert any(r["logger"].startswith("uvicorn") and "Uvicorn running on" in r["message"] for r in records)

    (access,) = [r for r in records if r.get("correlation_id") == cid]
    assert access["logger"] == "gpuaas_api.access" and access["tenant_id"] == tenant["id"], access
    assert access["http_method"] == "POST" and access["http_status"] == 201 and access["duration_ms"] > 0
    assert access["http_route"] == "/v1/tenants/{tenant_id}/projects"
    assert access["http_path"] == f"/v1/tenants/{tenant['id']}/projects"

    (lookup,) = [r for r in records if r.get("correlation_id") == other_cid]
    assert lookup["project_id"] == missing and lookup["http_status"] == 404, lookup
    assert lookup["http_route"] == "/v1/projects/{project_id}"
    assert "tenant_id" not in lookup  # only the ids the request names


def test_the_log_level_setting_holds(db_url, admin_token, tmp_path):
    proc, url = serve(db_url, tmp_path / "serve.log", GPUAAS_LOG_LEVEL="WARNING")
    try:
        assert httpx.get(f"{url}/v1/me", headers={"Authorization": f"Bearer {admin_token}"}).status_code == 200
        assert httpx.get(f"{url}/v1/me").status_code == 401
    finally:
        stop(proc)
    records = json_lines(tmp_path / "serve.log")
    assert not [r for r in records if r["level"] in ("DEBUG", "INFO")], records
    assert not [r for r in records if r["logger"] == "gpuaas_api.access"]


def test_a_worker_process_logs_its_run_with_its_ids_and_serves_its_metrics(ops, tmp_path):
    instance, _ = make_instance(ops, "logged")
    port = free_port()
    log_path = tmp_path / "worker.log"
    env = os.environ | {
        "DATABASE_URL": ops.db_url, "GPUAAS_STATE_DIR": str(ops.settings.state_dir),
        "GPUAAS_SECRET_KEY": ops.settings.secret_key, "GPUAAS_SSH_HOST_KEY_CHECKING": "false",
        "GPUAAS_LEASE_SECONDS": "2", "GPUAAS_WORKER_POLL_SECONDS": "0.2", "GPUAAS_WORKER_METRICS_PORT": str(port)}
    name = f"logged-{uuid.uuid4().hex[:6]}"
    worker = subprocess.Popen(CLI + ["worker", "--name", name], env=env, stdout=log_path.open("w"),
                              stderr=subprocess.STDOUT)
    cid = f"run-{uuid.uuid4().hex}"
    try:
        op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202,
                        headers={"X-Correlation-ID": cid}).json()
        done = wait_op(ops, op["id"])
        exposition = wait_for(lambda: _scrape(f"http://127.0.0.1:{port}/metrics"), 30, what="the worker's /metrics")
    finally:
        stop(worker)
    assert done["status"] == "succeeded", done

    records = json_lines(log_path)
    run = [r for r in records if r.get("operation_id") == op["id"]]
    assert run, records
    for r in run:
        assert r["correlation_id"] == cid and r["instance_id"] == instance["id"], r
        assert r["project_id"] == ops.ids["project_a1"] and r["tenant_id"] == ops.ids["tenant_a"], r
    assert any(f"operation {op['id']} deploy: successful" in r["message"] for r in run), run
    # Lines outside any run carry no operation's ids.
    started = [r for r in records if "worker" in r["message"] and "started" in r["message"]]
    assert started and "operation_id" not in started[0]

    families = {f.name: f for f in text_string_to_metric_families(exposition)}
    durations = {s.labels["result"]: s.value for s in families["gpuaas_operation_duration_seconds"].samples
                 if s.name.endswith("_count") and s.labels["kind"] == "deploy"}
    assert durations == {"succeeded": 1.0}
    beats = {s.labels["source"]: s.value for s in families["gpuaas_worker_heartbeats"].samples
             if s.name.endswith("_total") and s.labels["worker"] == name}
    assert beats["loop"] >= 1 and beats.get("lease", 0) >= 1, beats
    (last,) = [s.value for s in families["gpuaas_worker_last_heartbeat_timestamp_seconds"].samples
               if s.labels["worker"] == name]
    assert time.time() - 60 < last <= time.time()
    ingested = sum(s.value for s in families["gpuaas_events_ingested"].samples if s.name.endswith("_total"))
    timeline = ops.sql("SELECT count(*) AS n FROM instance_events WHERE app_instance_id = %s AND type LIKE 'run.%%'",
                       (instance["id"],))[0]["n"]
    assert ingested == timeline > 0


def _scrape(url: str) -> str | None:
    try:
        r = httpx.get(url, timeout=2)
    except httpx.TransportError:
        return None
    return r.text if r.status_code == 200 else None

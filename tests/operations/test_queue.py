"""The queue and its guarantees, with real workers running real ansible-runner processes of
tests/operations/playbooks/step.yml on localhost (the `slow` marker file keeps a run going until the
test removes it): idempotency under concurrent retries, 409 conflicts, per-instance FIFO
serialization with parallelism across instances, cancel (queued and running: the process tree is
gone within 10 s), timeouts, lease recovery after SIGKILL of a `gpuaas worker` subprocess, and no
secret value in events, audit, API responses, worker logs or artifacts."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from .helpers import events, instance_secrets, make_instance, members, serving, wait_for, wait_op

SA = "service_account"


def post(ops, path: str, expect: int | None = 202, **kw):
    r = ops.w.call(SA, "POST", path, expect, **kw)
    return r.json()


def run_processes(op_id: str) -> list[int]:
    """Processes carrying this operation's marker in their environment (the run's whole tree)."""
    needle = f"GPUAAS_OPERATION_ID={op_id}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def running_deploy(ops, name: str, **params) -> tuple[dict, dict, Path]:
    instance, marker = make_instance(ops, name, **params)
    (marker / "slow").touch()
    op = post(ops, f"/v1/instances/{instance['id']}/deploy")
    wait_for(lambda: (marker / "log").exists(), 60, what="the playbook to start")
    return instance, op, marker


def test_idempotency_key_under_concurrent_retries(ops):
    instance, _ = make_instance(ops, "idem")
    url = f"/v1/instances/{instance['id']}/deploy"

    def fire(_):
        r = ops.w.client.post(url, headers=ops.w.headers(SA) | {"Idempotency-Key": "deploy-1"})
        return r.status_code, r.json()["id"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(fire, range(16)))
    assert {s for s, _ in results} == {202}
    assert len({i for _, i in results}) == 1
    assert len(ops.sql("SELECT id FROM operations WHERE instance_id = %s", (instance["id"],))) == 1
    # a key is scoped to caller, route and target: on another route it is another request
    other = ops.w.client.post(f"/v1/instances/{instance['id']}/refresh", headers=ops.w.headers(SA) | {
        "Idempotency-Key": "deploy-1"})
    assert other.status_code == 202 and other.json()["id"] not in {i for _, i in results}
    # member add (queued behind the deploy) retried concurrently: one operation, one pending member
    with ThreadPoolExecutor(6) as pool:
        adds = list(pool.map(lambda _: ops.w.client.post(
            f"/v1/instances/{instance['id']}/members", json={"role": "worker", "allocation_id": ops.ids["alloc_ops"]},
            headers=ops.w.headers(SA) | {"Idempotency-Key": "add-1"}), range(6)))
    assert {r.status_code for r in adds} == {202}
    assert len({r.json()["id"] for r in adds}) == 1
    assert len(members(ops, instance["id"])) == 4


def test_conflicts_are_409_with_a_reason(ops):
    instance, marker = make_instance(ops, "conf")
    iid = instance["id"]
    ops.start_worker()
    assert wait_op(ops, post(ops, f"/v1/instances/{iid}/deploy")["id"])["status"] == "succeeded"

    def refused(path, code, **kw):
        r = ops.w.client.post(path, headers=ops.w.headers(SA), **kw)
        assert r.status_code == 409, (path, r.text)
        assert r.json()["error"]["code"] == code, r.text
        return r.json()["error"]

    refused(f"/v1/instances/{iid}/deploy", "instance_already_deployed")
    refused(f"/v1/instances/{iid}/rollback", "no_previous_version")
    worker_a, worker_b = [m for m in members(ops, iid) if m["role"] == "worker"]
    # hold the queue with a slow reconfigure so the next requests stay queued
    (marker / "slow").touch()
    hold = post(ops, f"/v1/instances/{iid}/reconfigure", json={"parameters": {}})
    remove = post(ops, f"/v1/instances/{iid}/members/{worker_a['id']}/remove")
    busy = refused(f"/v1/instances/{iid}/members/{worker_a['id']}/drain", "member_busy")
    assert busy["details"]["operation_id"] == remove["id"] and busy["details"]["kind"] == "member_remove"
    refused(f"/v1/instances/{iid}/members/{worker_b['id']}/resume", "member_state_conflict")
    (marker / "slow").unlink()
    assert wait_op(ops, remove["id"])["status"] == "succeeded"
    assert wait_op(ops, hold["id"])["status"] == "succeeded"
    refused(f"/v1/instances/{iid}/members/{worker_a['id']}/remove", "member_already_removed")
    down = post(ops, f"/v1/instances/{iid}/decommission")
    refused(f"/v1/instances/{iid}/members/{worker_b['id']}/drain", "instance_decommissioning")
    assert wait_op(ops, down["id"])["status"] == "succeeded"
    refused(f"/v1/instances/{iid}/members/{worker_b['id']}/drain", "instance_not_operable")
    refused(f"/v1/instances/{iid}/members", "instance_not_operable",
            json={"role": "worker", "allocation_id": ops.ids["alloc_ops"]})


def intervals(marker: Path) -> list[tuple[float, float]]:
    starts, out = [], []
    for line in (marker / "log").read_text().splitlines():
        parts = line.split()
        if parts[0] == "start":
            starts.append(float(parts[-1]))
        else:
            out.append((starts.pop(0), float(parts[-1])))
    return out


def test_one_operation_at_a_time_per_instance_and_parallel_across_instances(ops):
    (a, marker_a), (b, marker_b) = make_instance(ops, "ser-a"), make_instance(ops, "ser-b", allocation="alloc_ops2")
    ops.start_worker(name="w1")
    ops.start_worker(name="w2")
    queued = []
    for inst in (a, b):
        queued.append(post(ops, f"/v1/instances/{inst['id']}/deploy"))
        queued.append(post(ops, f"/v1/instances/{inst['id']}/reconfigure", json={"parameters": {"round": 2}}))
        queued.append(post(ops, f"/v1/instances/{inst['id']}/reconfigure", json={"parameters": {"round": 3}}))
    for op in queued:
        assert wait_op(ops, op["id"])["status"] == "succeeded"
    for marker in (marker_a, marker_b):
        spans = intervals(marker)
        assert len(spans) == 3
        assert all(prev[1] <= nxt[0] for prev, nxt in zip(spans, spans[1:], strict=False)), spans
    # FIFO per instance: the runs started in the order they were accepted
    rows = ops.sql("SELECT id, started_at FROM operations WHERE instance_id = %s ORDER BY seq", (a["id"],))
    assert [r["started_at"] for r in rows] == sorted(r["started_at"] for r in rows)
    # two workers, two instances: at least one pair of runs overlapped in time
    span_a, span_b = intervals(marker_a), intervals(marker_b)
    assert any(x[0] < y[1] and y[0] < x[1] for x in span_a for y in span_b), (span_a, span_b)
    owners = {r["lease_owner"] for r in ops.sql("SELECT e.payload->>'worker' AS lease_owner FROM instance_events e "
                                                 "WHERE type = 'operation.started'")}
    assert len({o.split("/")[0] for o in owners}) == 2


def test_cancel_queued_is_immediate_and_cancel_running_kills_the_process_tree(ops):
    instance, op, marker = None, None, None
    ops.start_worker()
    instance, op, marker = running_deploy(ops, "cancel")
    queued = post(ops, f"/v1/instances/{instance['id']}/reconfigure", json={"parameters": {}})
    canceled = post(ops, f"/v1/operations/{queued['id']}/cancel")
    assert canceled["status"] == "canceled"
    assert run_processes(op["id"]), "the run should be alive before the cancel"
    started = time.monotonic()
    asked = post(ops, f"/v1/operations/{op['id']}/cancel")
    assert asked["status"] == "running" and asked["cancel_requested"]
    done = wait_op(ops, op["id"], timeout=10)
    assert done["status"] == "canceled"
    wait_for(lambda: not run_processes(op["id"]), 10 - (time.monotonic() - started), 0.1, "the run's processes to end")
    assert time.monotonic() - started < 10
    got = ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()
    assert got["status"] == "failed" and "canceled" in got["status_reason"]
    refusal = ops.w.client.post(f"/v1/operations/{op['id']}/cancel", headers=ops.w.headers(SA))
    assert refusal.status_code == 409 and refusal.json()["error"]["code"] == "operation_finished"


def test_timeout_stops_the_run_and_fails_truthfully(ops):
    ops.settings.timeouts["deploy"] = 3
    ops.start_worker()
    instance, op, _ = running_deploy(ops, "slowpoke")
    done = wait_op(ops, op["id"], timeout=30)
    assert done["status"] == "failed" and done["error"]["code"] == "timeout"
    wait_for(lambda: not run_processes(op["id"]), 10, what="the timed-out run to be gone")
    assert ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()["status"] == "failed"


def worker_process(ops, log_path: Path, name: str) -> subprocess.Popen:
    env = os.environ | {
        "DATABASE_URL": ops.db_url, "GPUAAS_STATE_DIR": str(ops.settings.state_dir),
        "GPUAAS_SECRET_KEY": ops.settings.secret_key,
        "GPUAAS_LEASE_SECONDS": str(ops.settings.lease_seconds), "GPUAAS_MAX_ATTEMPTS": "2",
        "GPUAAS_WORKER_POLL_SECONDS": "0.2"}
    return subprocess.Popen([sys.executable, "-m", "gpuaas_api.cli", "--log-level", "DEBUG", "worker", "--name", name],
                            env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT)


def test_lease_recovery_after_a_worker_is_killed_mid_run(ops, tmp_path):
    instance, marker = make_instance(ops, "lease")
    (marker / "slow").touch()
    first = worker_process(ops, tmp_path / "w1.log", "doomed")
    try:
        op = post(ops, f"/v1/instances/{instance['id']}/deploy")
        wait_for(lambda: (marker / "log").exists(), 60, what="the first worker's run to start")
        assert ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()["status"] == "starting"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    # the host died with the worker: its orphaned run goes too (what already ended with it is gone)
    for pid in run_processes(op["id"]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    (marker / "slow").unlink()
    second = worker_process(ops, tmp_path / "w2.log", "rescuer")
    try:
        done = wait_op(ops, op["id"], timeout=60)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    requeued = events(ops, instance["id"], type="operation.requeued")
    assert len(requeued) == 1 and requeued[0]["payload"]["worker"].startswith("doomed")
    assert ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()["status"] == "running"
    secret = instance_secrets(ops, instance["id"])["munge_key"]
    for log in ("w1.log", "w2.log"):
        text = (tmp_path / log).read_text()
        assert secret not in text and ops.settings.secret_key not in text
    assert "lease expired" in (tmp_path / "w2.log").read_text()


def test_lease_expiry_after_the_last_attempt_fails_the_operation_and_instance(ops):
    from gpuaas_api.operations import service

    instance, _ = make_instance(ops, "exhaust")
    op = post(ops, f"/v1/instances/{instance['id']}/deploy")
    with ops.database.transaction() as conn:
        claimed = service.claim(conn, "ghost/0", 1, "ghost-machine")
        assert str(claimed["id"]) == op["id"]
        conn.execute("UPDATE operations SET attempt = max_attempts, lease_expires_at = now() - interval '1 s' "
                     "WHERE id = %s", (op["id"],))
        conn.execute("UPDATE app_instances SET status = 'starting' WHERE id = %s", (instance["id"],))
        conn.execute("UPDATE app_instance_members SET status = 'joining' WHERE instance_id = %s", (instance["id"],))
    with ops.database.transaction() as conn:
        assert [o["status"] for o in service.recover_expired(conn)] == ["failed"]
    done = ops.w.call(SA, "GET", f"/v1/operations/{op['id']}", 200).json()
    assert done["error"]["code"] == "lease_expired"
    got = ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()
    assert got["status"] == "failed" and "lease expired" in got["status_reason"]
    assert {m["status"] for m in members(ops, instance["id"])} == {"failed"}


def test_no_secret_value_in_events_audit_responses_or_artifacts(ops, caplog):
    """The playbook leaks the key on purpose (debug + failure message): the service scrubs it."""
    instance, marker = make_instance(ops, "leaky", leak_secret=True, fail_step="deploy")
    ops.start_worker()
    with caplog.at_level("DEBUG"):
        op = wait_op(ops, post(ops, f"/v1/instances/{instance['id']}/deploy")["id"])
    assert op["status"] == "failed"
    secret = instance_secrets(ops, instance["id"])["munge_key"]
    assert len(secret) >= 32 and (marker / "munge.key").read_text() == secret  # it did reach the run
    assert "********" in op["error"]["message"]
    bodies = [ops.w.call(SA, "GET", f"/v1/operations/{op['id']}", 200).text,
              ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).text,
              ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}/events", 200, params={"limit": 500}).text,
              ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}/operations", 200).text,
              ops.w.call("project_admin", "GET", "/v1/audit", 200, params={"project_id": ops.ids["project_a1"]}).text,
              caplog.text]
    for body in bodies:
        assert secret not in body
    rows = ops.sql("SELECT payload::text AS t FROM instance_events UNION ALL SELECT coalesce(after::text, '') FROM "
                   "audit_log UNION ALL SELECT coalesce(error::text, '') FROM operations")
    assert not [r for r in rows if secret in r["t"]]
    blob = ops.w.call(SA, "GET", f"/v1/operations/{op['id']}/artifacts", 200).content
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        files = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    assert any("job_events" in n for n in files) and any(n.endswith("/stdout") for n in files)
    assert not [n for n, text in files.items() if secret in text or ops.settings.secret_key in text]
    assert any("leaked ********" in text for text in files.values())
    on_disk = [p for p in ops.settings.state_dir.rglob("*") if p.is_file() and secret in p.read_text(errors="ignore")]
    assert on_disk == []  # the secret vars file is gone, the copy in runs/ is scrubbed
    # artifacts need the right to run the operation
    denied = ops.w.client.get(f"/v1/operations/{op['id']}/artifacts", headers=ops.w.headers("project_member"))
    assert denied.status_code == 403
    other = ops.w.client.get(f"/v1/operations/{op['id']}/artifacts", headers=ops.w.headers("other_service_account"))
    assert other.status_code == 404  # another project's caller learns nothing, not even that it exists


@pytest.fixture
def live_server(app):
    with serving(app) as url:
        yield url


def read_sse(url: str, headers: dict, n: int) -> list[dict]:
    out, current = [], {}
    with httpx.stream("GET", url, headers=headers, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                if "id" in current:
                    out.append(current)
                    if len(out) == n:
                        return out
                current = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                current[key] = value
    return out


def test_event_stream_follows_the_run_and_resumes(ops, live_server):
    instance, _ = make_instance(ops, "sse")
    url = f"{live_server}/v1/instances/{instance['id']}/events/stream"
    headers = ops.w.headers(SA)
    ops.start_worker()
    op = post(ops, f"/v1/instances/{instance['id']}/deploy")
    first = read_sse(url, headers, 5)
    assert [e["event"] for e in first][:2] == ["apps.instance.requested", "operation.queued"]
    wait_op(ops, op["id"])
    rest = read_sse(url, headers | {"Last-Event-ID": first[-1]["id"]}, 10)
    assert int(rest[0]["id"]) == int(first[-1]["id"]) + 1
    everything = read_sse(url + "?max_seconds=2", headers, 10_000)
    assert "apps.instance.running" in [e["event"] for e in everything]
    denied = httpx.get(url, headers=ops.w.headers("other_service_account"), timeout=10)
    assert denied.status_code == 404

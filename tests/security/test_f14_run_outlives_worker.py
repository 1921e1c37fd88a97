"""Issue 22, finding 1: a run outlived its operation, and its registry pull credential stayed valid. A
worker was killed (kill -9) during a run; lease recovery then ended the operation (`canceled`), but
ansible-playbook, started by ansible-runner with SIGHUP ignored, went on acting on the host, and the
run's pull credential still obtained registry tokens until the kind's timeout. Now every terminal path
revokes the operation's secrets, the run guard ends a run with its worker, a sweep on the run's
machine proves it over, and until then the operation says `run_may_be_live`.

Real parts: the service and workers as processes, a Debian 13 test host running podman, a registry
host that takes only tokens of the service (the oci_demo fixture, shared with tests/e2e). The
registry is frozen (SIGSTOP) during the test so that the run is caught in its pull, holding its
credential: the test reads it from the host's short-lived auth file, as the host's podman does."""

from __future__ import annotations

import base64
import json
import signal
import uuid

import httpx
import pytest
from gpuaas_api.demo import OCI_APP, OCI_HOST, OCI_REPOSITORY, OCI_TEST_HOST_PARAMETERS
from gpuaas_api.operations import service
from operations.helpers import make_instance, wait_for
from operations.test_queue import run_processes

pytestmark = [pytest.mark.hosts, pytest.mark.slow]
LEASE_SECONDS = "8"
SA = "service_account"
AUTH_FILES = "/run/gpuaas-oci-auth-*.json"


def token_status(demo, credential: dict) -> tuple[int, list]:
    """What the registry token service answers the credential for a pull of the workload's repository."""
    basic = base64.b64encode(f"{credential['username']}:{credential['password']}".encode()).decode()
    config = demo.admin.get("/v1/registry/certificate")
    response = httpx.get(f"{demo.admin.base_url}/v1/registry/token", timeout=30,
                         params={"service": config["service"], "scope": f"repository:{OCI_REPOSITORY}:pull"},
                         headers={"Authorization": f"Basic {basic}"})
    return response.status_code, (response.json().get("access_token") and [OCI_REPOSITORY]) or []


def pull_credential(demo, host: str) -> dict | None:
    """The credential in the host's auth file while its pull runs (containers-auth.json)."""
    text = demo.host_sh(host, f"cat {AUTH_FILES} 2>/dev/null || true")
    if not text:
        return None
    (entry,) = json.loads(text)["auths"].values()
    username, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
    return {"username": username, "password": password}


def freeze_registry(demo, sig: str) -> None:
    demo.registry.exec("systemctl", "kill", "--signal", sig, "docker-registry").check_returncode()


def test_a_killed_workers_run_ends_and_its_credential_is_refused(oci_demo):
    demo = oci_demo
    host = OCI_HOST  # the world's own host: tests/e2e may add hosts of their own to it
    version = demo.versions.get("v1") or demo.versions.setdefault("v1", demo.register_oci_app("v1"))
    resident = demo.processes.pop()  # the demo's own worker steps aside: the doomed one must claim the run
    resident.terminate()
    resident.wait(60)
    doomed = demo.start_worker("worker-doomed.log", GPUAAS_LEASE_SECONDS=LEASE_SECONDS)
    rescuer = None
    freeze_registry(demo, "SIGSTOP")
    try:
        created = demo.sa.post(f"/v1/projects/{demo.ids['project']}/instances", {
            "name": f"killed-{uuid.uuid4().hex[:6]}", "app_slug": OCI_APP, "version": version["version"],
            "allocation_ids": [demo.ids["pool-oci"]], "topology": [{"role": "replica", "count": 1}],
            "parameters": OCI_TEST_HOST_PARAMETERS})
        op = demo.sa.post(f"/v1/instances/{created['id']}/deploy")
        credential = wait_for(lambda: pull_credential(demo, host), 240, interval=0.5,
                              what="the run to start its pull with the credential")
        assert token_status(demo, credential) == (200, [OCI_REPOSITORY]), "the run's credential is live"
        assert run_processes(op["id"]), "the run's processes carry the operation's marker"

        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        # The run guard ends the run with its worker, before anyone recovers the operation.
        wait_for(lambda: not run_processes(op["id"]), 15, what="the killed worker's run to end")
        running = demo.sa.get(f"/v1/operations/{op['id']}")
        assert running["status"] == "running" and running["run_may_be_live"] is True, running

        demo.sa.post(f"/v1/operations/{op['id']}/cancel")
        rescuer = demo.start_worker("worker-rescuer.log")
        ended = wait_for(lambda: (lambda o: o if o["status"] == "canceled" else None)(
            demo.sa.get(f"/v1/operations/{op['id']}")), 60, interval=0.5, what="lease recovery to cancel it")
        assert ended["error"]["code"] == "canceled", ended
        # The rescuer runs on the killed worker's machine: its sweep proves the run over.
        ended = wait_for(lambda: (lambda o: o if not o["run_may_be_live"] else None)(
            demo.sa.get(f"/v1/operations/{op['id']}")), 30, what="the sweep to prove the run over")
        assert ended["run_ended_at"] and "run_host" not in ended, ended  # a control-plane machine: not shown
        assert not run_processes(op["id"])
        assert token_status(demo, credential)[0] == 401, "the ended operation's credential still gets tokens"
    finally:
        freeze_registry(demo, "SIGCONT")
        doomed.kill()
        demo.processes.append(rescuer or demo.start_worker())
    # Released, the host's own pull (its ssh session was cut) is refused, fails and removes its auth file.
    wait_for(lambda: demo.host_sh(host, f"ls {AUTH_FILES} 2>/dev/null || true") == "", 60,
             what="the host's orphaned pull to end and remove its auth file")


def test_an_operation_recovered_for_a_worker_on_another_machine_says_its_run_may_be_live(ops):
    """No worker here can prove a run on another machine over: the operation says so until one there
    does. (The operations tests' world: real PostgreSQL, no host needed, nothing runs.)"""
    instance, _ = make_instance(ops, "elsewhere")
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    with ops.database.transaction() as conn:
        assert str(service.claim(conn, "far-away:1:x/0", 30, "far-away")["id"]) == op["id"]
        conn.execute("UPDATE operations SET cancel_requested = true, lease_expires_at = now() - interval '1 s' "
                     "WHERE id = %s", (op["id"],))
    with ops.database.transaction() as conn:
        assert [o["status"] for o in service.recover_expired(conn)] == ["canceled"]
        assert service.sweep_runs(conn, "this-machine", lambda _: None) == []
    ended = ops.w.call(SA, "GET", f"/v1/operations/{op['id']}", 200).json()
    assert (ended["status"], ended["run_may_be_live"]) == ("canceled", True), ended
    swept = []
    with ops.database.transaction() as conn:  # a worker on that machine sweeps
        assert [str(i) for i in service.sweep_runs(conn, "far-away", swept.append)] == [op["id"]]
    assert [str(i) for i in swept] == [op["id"]]
    ended = ops.w.call(SA, "GET", f"/v1/operations/{op['id']}", 200).json()
    assert ended["run_may_be_live"] is False and ended["run_ended_at"], ended

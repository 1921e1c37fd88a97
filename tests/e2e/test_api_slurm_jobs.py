"""End to end: tenants use their Slurm clusters through the platform (docs/scheduler.md). Two projects of one
tenant each run a Slurm cluster (a controller and a worker on real test hosts, accounting on); each project's
service account submits, lists and cancels jobs through the API; Slurm itself refuses what the API refuses; a
person registers an SSH key, logs in to the controller and uses sbatch and squeue natively, and is locked out
once unbound; a node is drained and resumed through the nodes routes. After each step the test reads Slurm's
own state on the hosts.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gpuaas_api.demo import TEST_HOST_PARAMETERS, ApiError, Demo
from operations.helpers import wait_for

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

LONG = "#!/bin/sh\nsleep 600\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The service with a worker that runs two operations at once; project research (the demo's) and project
    vision, each with its service account, its allocation and a deployed Slurm instance."""
    lines = []
    d = Demo(prefix=f"jobs{uuid.uuid4().hex[:6]}", say=lines.append, worker_env={"GPUAAS_WORKER_CONCURRENCY": "2"})
    try:
        d.start_service()
        d.setup_tenancy()
        tenant = d.ids["tenant"]
        d.ids["vision"] = d.admin.post(f"/v1/tenants/{tenant}/projects", {"name": "vision"})["id"]
        lead = d.admin.post(f"/v1/tenants/{tenant}/users", {"email": "lead@vision.example"})["id"]
        d.admin.post("/v1/role-bindings", {"principal_kind": "user", "principal_id": lead, "role": "project_admin",
                                           "project_id": d.ids["vision"]})
        lead_api = d.admin.as_(d.admin.post(f"/v1/users/{lead}/tokens", {"name": "t", "expires_in_days": 1})["token"])
        # an sa_operator, as service accounts are by default
        sa = lead_api.post(f"/v1/projects/{d.ids['vision']}/service-accounts", {"name": "pipeline"})["id"]
        d.vision = d.admin.as_(lead_api.post(f"/v1/projects/{d.ids['vision']}/service-accounts/{sa}/tokens",
                                             {"name": "ci"})["token"])
        d.register_hosts({"pool-r": ["ctl", "w1"]})
        d.register_slurm_app()
        _second_project_capacity(d)
        for project, api, pool, name in (("project", d.sa, "pool-r", "hpc"), ("vision", d.vision, "pool-v", "vis")):
            d.ids[name] = api.post(f"/v1/projects/{d.ids[project]}/instances", {
                "name": name, "app_slug": "slurm", "allocation_ids": [d.ids[pool]],
                "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
                "parameters": TEST_HOST_PARAMETERS})["id"]
        deploys = [(api, api.post(f"/v1/instances/{d.ids[name]}/deploy")) for api, name in ((d.sa, "hpc"),
                                                                                           (d.vision, "vis"))]
        for api, op in deploys:
            done = wait_for(lambda api=api, op=op: _finished(api, op["id"]), 900, 0.5, "the deploys")
            assert done["status"] == "succeeded", (done["error"], done.get("failed_hosts"))
        d.lines = lines
        yield d
    finally:
        d.close()


def _second_project_capacity(d: Demo) -> None:
    from gpuaas_api import testhosts

    for host in testhosts.up(d.prefix, ["ctl2", "w2"], "slurm"):
        d.hosts[host["name"]] = host
    d.ids["pool-v"] = d.admin.post("/v1/allocations", {
        "project_id": d.ids["vision"], "name": "pool-v", "capacity_shape": "baremetal", "gpu_count": 1,
        "region": "local", "hosts": [{"name": n, "address": d.hosts[n]["address"], "ssh_user": "root"}
                                     for n in ("ctl2", "w2")]})["id"]
    d.admin.post(f"/v1/projects/{d.ids['vision']}/entitlements", {"app_slug": "slurm"})


def _finished(api, op_id: str) -> dict | None:
    op = api.get(f"/v1/operations/{op_id}")
    return op if op["status"] in ("succeeded", "failed", "canceled") else None


def squeue(d: Demo, host: str = "ctl") -> dict[str, dict]:
    """Slurm's own queue: job id -> {user, account, state}."""
    out = d.host_sh(host, "squeue --noheader --all --format='%i|%u|%a|%T'")
    return {i: {"user": u, "account": a, "state": s} for i, u, a, s in (line.split("|") for line in out.splitlines())}


def syncs_settled(d: Demo, api, instance: str) -> bool:
    ops = api.get(f"/v1/instances/{d.ids[instance]}/operations?limit=200")["items"]
    open_syncs = [o for o in ops if o["kind"] == "access_sync" and o["status"] in ("queued", "running")]
    failed = [o for o in ops if o["kind"] == "access_sync" and o["status"] == "failed"]
    assert not failed, failed
    return not open_syncs


def test_each_projects_service_account_submits_lists_and_cancels_its_own_jobs(world):
    d = world
    hpc, vis = f"/v1/instances/{d.ids['hpc']}", f"/v1/instances/{d.ids['vis']}"
    started = time.monotonic()
    mine = d.sa.post(f"{hpc}/jobs", {"name": "train", "script": LONG, "resources": {"time_limit_minutes": 30}})
    submit_seconds = time.monotonic() - started
    theirs = d.vision.post(f"{vis}/jobs", {"name": "infer", "script": LONG})
    assert submit_seconds < 5, submit_seconds  # the bench measures the target (bench/bench_jobs.py)
    assert mine["account"] == "research" and theirs["account"] == "vision"
    # Slurm runs each job as the service account's own Unix user, charged to its project's account.
    assert squeue(d)[mine["id"]] | {"state": ""} == {"user": mine["runtime_user"], "account": "research", "state": ""}
    assert squeue(d, "ctl2")[theirs["id"]]["account"] == "vision"
    assert mine["runtime_user"].startswith("sa-pipeline-") and mine["runtime_user"] != theirs["runtime_user"]

    # A job of another account on the same cluster (root's, submitted by hand) is not the project's.
    root_job = d.slurm("sbatch --parsable --account=root --wrap='sleep 600'")
    listed = [j["id"] for j in d.sa.get(f"{hpc}/jobs")["items"]]
    assert mine["id"] in listed and root_job not in listed
    d.sa.call("GET", f"{hpc}/jobs/{root_job}", expect=(404,))
    d.sa.call("POST", f"{hpc}/jobs/{root_job}/cancel", expect=(404,))
    # Another project's service account cannot reach this instance at all.
    d.vision.call("GET", f"{hpc}/jobs", expect=(404,))
    d.vision.call("POST", f"{hpc}/jobs/{mine['id']}/cancel", expect=(404,))

    cancelled = d.sa.post(f"{hpc}/jobs/{mine['id']}/cancel")
    assert cancelled["id"] == mine["id"]
    wait_for(lambda: squeue(d).get(mine["id"], {"state": "CANCELLED"})["state"] in ("CANCELLED", "COMPLETING"), 2,
             0.1, "the cancel to show in squeue")
    assert d.sa.get(f"{hpc}/jobs/{mine['id']}")["state"] == "cancelled"
    assert squeue(d)[root_job]["state"] in ("PENDING", "RUNNING")  # untouched
    d.slurm(f"scancel {root_job}")
    d.vision.post(f"{vis}/jobs/{theirs['id']}/cancel")


def test_a_submit_into_another_account_is_refused_by_the_api_and_by_slurm(world):
    d = world
    hpc = f"/v1/instances/{d.ids['hpc']}"
    with pytest.raises(ApiError, match="account_not_allowed"):
        d.sa.post(f"{hpc}/jobs", {"name": "sneak", "script": LONG, "account": "vision"})
    user = d.sa.post(f"{hpc}/jobs", {"name": "probe", "script": "#!/bin/sh\ntrue\n"})["runtime_user"]
    # Tried directly on the cluster, as that identity, Slurm's enforced associations refuse it too.
    for account in ("vision", "root"):
        tried = subprocess.run(["podman", "exec", d.hosts["ctl"]["container"], "runuser", "-u", user, "--",
                                "sbatch", f"--account={account}", "--wrap=true"],
                               capture_output=True, text=True, timeout=60)
        assert tried.returncode != 0 and "Invalid account" in tried.stderr, (account, tried.stderr)


def ssh(d: Demo, key_file, user: str, address: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-i", str(key_file), "-o", "StrictHostKeyChecking=no", "-o",
                           "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                           "-o", "LogLevel=ERROR", f"{user}@{address}", command],
                          capture_output=True, text=True, timeout=120)


def test_a_person_with_access_logs_in_uses_slurm_natively_and_is_locked_out_once_unbound(world, tmp_path):
    d = world
    hpc = f"/v1/instances/{d.ids['hpc']}"
    alice = d.admin.post(f"/v1/tenants/{d.ids['tenant']}/users", {"email": "alice@acme.example"})["id"]
    binding = d.admin.post("/v1/role-bindings", {"principal_kind": "user", "principal_id": alice,
                                                 "role": "project_member", "project_id": d.ids["project"]})
    alice_api = d.admin.as_(d.admin.post(f"/v1/users/{alice}/tokens", {"name": "t", "expires_in_days": 1})["token"])
    key = Ed25519PrivateKey.generate()
    key_file = tmp_path / "id_ed25519"
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    alice_api.post("/v1/me/ssh-keys", {"name": "laptop", "public_key": public.decode() + " alice@laptop"})
    wait_for(lambda: syncs_settled(d, d.sa, "hpc"), 300, 1, "the access syncs")
    access = alice_api.get(f"{hpc}/access")
    assert access["synced"] and access["account"] == "research" and access["ssh_keys"] == 1
    (login,) = access["login_hosts"]
    assert login["node_name"] == "ctl"
    # No access on the other project's cluster: her project is research.
    alice_api.call("GET", f"/v1/instances/{d.ids['vis']}/access", expect=(404,))

    session = ssh(d, key_file, access["username"], login["address"],
                  "sbatch --parsable --wrap='sleep 600' && squeue --noheader --me --format='%i %a %u'")
    assert session.returncode == 0, session.stderr
    job_id, (queued_id, account, user) = session.stdout.split()[0], session.stdout.split()[1:4]
    assert (queued_id, account, user) == (job_id, "research", access["username"])
    # Her job is the project's: the service account sees it, owned by her.
    shown = d.sa.get(f"{hpc}/jobs/{job_id}")
    assert shown["owner"] == {"kind": "user", "id": alice} and shown["project_id"] == d.ids["project"]

    d.admin.call("DELETE", f"/v1/role-bindings/{binding['id']}", expect=(204,))
    wait_for(lambda: syncs_settled(d, d.sa, "hpc"), 300, 1, "the revoking access sync")
    refused = ssh(d, key_file, access["username"], login["address"], "true")
    assert refused.returncode != 0
    assert subprocess.run(["podman", "exec", d.hosts["ctl"]["container"], "id", access["username"]],
                          capture_output=True, timeout=30).returncode != 0  # her Unix user is gone
    assert job_id not in squeue(d)  # and with it her jobs
    # Grant, use and revoke are audited (a key is the tenant's record: read it as the platform does, break-glass).
    audit = d.admin.call("GET", f"/v1/audit?tenant_id={d.ids['tenant']}&limit=500",
                         headers={"X-Break-Glass-Reason": "e2e: the access audit trail"})["items"]
    assert {"iam.ssh_key.create", "iam.role_binding.create", "iam.role_binding.delete",
            "scheduler.job.submit", "scheduler.job.cancel"} <= {a["action"] for a in audit}


def test_a_node_is_drained_and_resumed_through_the_nodes_routes(world):
    d = world
    hpc = f"/v1/instances/{d.ids['hpc']}"
    (node,) = d.sa.get(f"{hpc}/nodes")["items"]
    assert node["name"] == "w1" and node["state"] in ("idle", "mixed", "allocated")
    drained = d.sa.post(f"{hpc}/nodes/w1/drain", {"reason": "swap a DIMM"})
    assert drained["state"] in ("drained", "draining") and drained["reason"] == "gpuaas-tenant: swap a DIMM"
    assert d.slurm("sinfo --noheader --Node --format='%t|%E' --nodes=w1") in ("drain|gpuaas-tenant: swap a DIMM",
                                                                             "drng|gpuaas-tenant: swap a DIMM")
    # A drain someone else set on the cluster is theirs to lift.
    resumed = d.sa.post(f"{hpc}/nodes/w1/resume")
    assert resumed["state"] == "idle", resumed
    assert d.slurm("sinfo --noheader --Node --format='%t' --nodes=w1") == "idle"
    d.slurm("scontrol update nodename=w1 state=drain reason='operator: maintenance'")
    with pytest.raises(ApiError, match="409"):
        d.sa.post(f"{hpc}/nodes/w1/resume")
    d.slurm("scontrol update nodename=w1 state=resume")
    assert [e["payload"]["action"] for e in d.events("hpc", type="scheduler.node.drain")] == ["drain"]

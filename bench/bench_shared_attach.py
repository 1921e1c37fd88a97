"""A tenant-shared Slurm runtime on a real test host (docs/tenant-shared.md): the time from attaching a project to
that project's first successful submit (issue 26).

    .venv/bin/python bench/bench_shared_attach.py [--rounds 5]

It starts the control service and a worker (as `gpuaas demo` does), one Slurm test host (controller and worker,
accounting on), and has a tenant admin create and deploy the tenant's shared runtime through the API. Then, each
round: a new project with a service account, entitled and on the runtime's allowlist; the clock starts at the
attach request (POST .../attachments); the service account submits a job every 100 ms until one is accepted
(before the access sync has made its Unix user and its Slurm association, the runtime refuses it: 409
identity_not_synced or 403 scheduler_refused); the clock stops at the first 201. Every call goes over HTTP.

Reports the median and the worst round, and what the access sync run itself took (its operation's start to
finish). No target is named by the issue; it is measured so that a change to the access playbook shows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from datetime import datetime

import httpx
from gpuaas_api import testhosts
from gpuaas_api.demo import TEST_HOST_PARAMETERS, Demo

JOB = "#!/bin/sh\ntrue\n"


def wait_succeeded(api, op_id: str, timeout: float = 900) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        op = api.get(f"/v1/operations/{op_id}")
        if op["status"] in ("succeeded", "failed", "canceled"):
            if op["status"] != "succeeded":
                raise RuntimeError(f"operation {op['kind']} {op['status']}: {op['error']}")
            return op
        time.sleep(0.5)
    raise TimeoutError(op_id)


def seconds(op: dict) -> float:
    return (datetime.fromisoformat(op["finished_at"]) - datetime.fromisoformat(op["started_at"])).total_seconds()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    lines: list[str] = []
    d = Demo(prefix=f"benchshr{uuid.uuid4().hex[:4]}", say=lines.append)
    to_submit, sync_runs = [], []
    try:
        d.start_service()
        d.setup_tenancy()
        tenant = d.ids["tenant"]
        admin = d.admin.post(f"/v1/tenants/{tenant}/users", {"email": "it@acme.example"})["id"]
        d.admin.post("/v1/role-bindings", {"principal_kind": "user", "principal_id": admin, "role": "tenant_admin",
                                           "tenant_id": tenant})
        ta = d.admin.as_(d.admin.post(f"/v1/users/{admin}/tokens", {"name": "t", "expires_in_days": 1})["token"])
        d.register_slurm_app()
        (host,) = testhosts.up(d.prefix, ["ctl"], "slurm")
        d.hosts["ctl"] = host
        pool = d.admin.post("/v1/allocations", {
            "project_id": d.ids["project"], "name": "pool", "capacity_shape": "baremetal", "gpu_count": 1,
            "region": "local", "hosts": [{"name": "ctl", "address": host["address"], "ssh_user": "root"}]})["id"]
        projects = [ta.post(f"/v1/tenants/{tenant}/projects", {"name": f"team{n}"})["id"] for n in range(args.rounds)]
        for project in projects:
            d.admin.post(f"/v1/projects/{project}/entitlements", {"app_slug": "slurm"})
        runtime = ta.post(f"/v1/projects/{d.ids['project']}/instances", {
            "name": "hpc", "app_slug": "slurm", "allocation_ids": [pool], "control_plane_scope": "tenant",
            "attachable_project_ids": projects, "parameters": TEST_HOST_PARAMETERS,
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]})["id"]
        wait_succeeded(ta, ta.post(f"/v1/instances/{runtime}/deploy")["id"])

        for project in projects:
            sa = ta.post(f"/v1/projects/{project}/service-accounts", {"name": "pipeline"})["id"]
            token = ta.post(f"/v1/projects/{project}/service-accounts/{sa}/tokens", {"name": "ci"})["token"]
            http = httpx.Client(base_url=d.sa.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
            started = time.perf_counter()
            attached = ta.post(f"/v1/instances/{runtime}/attachments", {"project_id": project, "reason": "bench"})
            while True:
                answer = http.post(f"/v1/instances/{runtime}/jobs", json={"name": "first", "script": JOB})
                if answer.status_code == 201:
                    break
                if answer.json()["error"]["code"] not in ("identity_not_synced", "scheduler_refused"):
                    raise RuntimeError(answer.text)
                time.sleep(0.1)
            to_submit.append(time.perf_counter() - started)
            sync_runs += [seconds(wait_succeeded(ta, op)) for op in attached["operation_ids"]]
    finally:
        d.close()

    results = {"rounds": len(to_submit), "attach_to_first_submit_p50_s": statistics.median(to_submit),
               "attach_to_first_submit_max_s": max(to_submit),
               "access_sync_run_p50_s": statistics.median(sync_runs) if sync_runs else None}
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""End to end: a tenant-shared Slurm runtime (docs/tenant-shared.md) on real test hosts. A tenant admin creates
the runtime in the tenant's shared project (its controller, with a reserved worker, on host ctl) and attaches
projects research and vision; vision contributes a worker (host w2). Each project's service account submits
through the jobs routes into its own account and sees only its own jobs; research's submit into vision's account
is refused until a tenant admin grants it, and is audited; an association removed by hand and one added by hand
show in the drift report and a sync repairs both; usage records of known jobs match sacct to the second and split
between the owner and the projects; detaching vision is refused while its job runs, then removes its account and
its worker. After each step the test reads Slurm's own state on the hosts. One runtime for the whole module.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from gpuaas_api import testhosts
from gpuaas_api.demo import TEST_HOST_PARAMETERS, ApiError, Demo
from operations.helpers import wait_for

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

LONG = "#!/bin/sh\nsleep 600\n"
SHORT = "#!/bin/sh\nsleep 3\n"


def _finished(api, op_id: str) -> dict | None:
    op = api.get(f"/v1/operations/{op_id}")
    return op if op["status"] in ("succeeded", "failed", "canceled") else None


def _succeeds(api, op_id: str, what: str) -> dict:
    done = wait_for(lambda: _finished(api, op_id), 900, 0.5, what)
    assert done["status"] == "succeeded", (what, done["error"], done.get("failed_hosts"))
    return done


def settled(api, instance_id: str) -> bool:
    """No operation of the instance is queued or running, and none of them failed."""
    ops = api.get(f"/v1/instances/{instance_id}/operations?limit=200")["items"]
    failed = [(o["kind"], o["error"]) for o in ops if o["status"] == "failed"]
    assert not failed, failed
    return not [o for o in ops if o["status"] in ("queued", "running")]


@pytest.fixture(scope="module")
def world():
    """The service; a tenant admin; the shared project (owner), research (the demo's, with its service account)
    and vision (with its own); the runtime deployed with both attached and vision's worker joined."""
    lines = []
    d = Demo(prefix=f"shr{uuid.uuid4().hex[:6]}", say=lines.append,
             worker_env={"GPUAAS_WORKER_CONCURRENCY": "2", "GPUAAS_METERING_INTERVAL_SECONDS": "2",
                         "GPUAAS_METERING_SETTLE_SECONDS": "3"})
    try:
        d.start_service()
        d.setup_tenancy()
        tenant = d.ids["tenant"]
        admin = d.admin.post(f"/v1/tenants/{tenant}/users", {"email": "it@acme.example"})["id"]
        d.admin.post("/v1/role-bindings", {"principal_kind": "user", "principal_id": admin, "role": "tenant_admin",
                                           "tenant_id": tenant})
        d.ta = d.admin.as_(d.admin.post(f"/v1/users/{admin}/tokens", {"name": "t", "expires_in_days": 1})["token"])
        for name in ("shared", "vision"):
            d.ids[name] = d.ta.post(f"/v1/tenants/{tenant}/projects", {"name": name})["id"]
        sa = d.ta.post(f"/v1/projects/{d.ids['vision']}/service-accounts", {"name": "pipeline"})["id"]
        d.vision = d.admin.as_(d.ta.post(f"/v1/projects/{d.ids['vision']}/service-accounts/{sa}/tokens",
                                         {"name": "ci"})["token"])
        d.register_slurm_app()  # entitles research
        for name in ("shared", "vision"):
            d.admin.post(f"/v1/projects/{d.ids[name]}/entitlements", {"app_slug": "slurm"})
        for host in testhosts.up(d.prefix, ["ctl", "w2"], "slurm"):
            d.hosts[host["name"]] = host
        for pool, project, host in (("pool-s", "shared", "ctl"), ("pool-v", "vision", "w2")):
            d.ids[pool] = d.admin.post("/v1/allocations", {
                "project_id": d.ids[project], "name": pool, "capacity_shape": "baremetal", "gpu_count": 1,
                "region": "local", "hosts": [{"name": host, "address": d.hosts[host]["address"], "ssh_user": "root"}]
            })["id"]

        d.ids["rt"] = d.ta.post(f"/v1/projects/{d.ids['shared']}/instances", {
            "name": "hpc", "app_slug": "slurm", "allocation_ids": [d.ids["pool-s"]], "control_plane_scope": "tenant",
            "attachable_project_ids": [d.ids["project"], d.ids["vision"]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
            "parameters": TEST_HOST_PARAMETERS})["id"]
        rt = f"/v1/instances/{d.ids['rt']}"
        split = d.ta.get(f"{rt}/billing")  # visible before the deploy: the owner pays for its reserved capacity
        assert {(m["node_name"], m["role"], m["project_name"], m["charged_as"]) for m in split["members"]} == {
            ("ctl", "controller", "shared", "tenant_shared_owner"), ("ctl", "worker", "shared", "tenant_shared_owner")}
        for project in ("project", "vision"):
            d.ta.post(f"{rt}/attachments", {"project_id": d.ids[project], "reason": "e2e"})
        _succeeds(d.ta, d.ta.post(f"{rt}/deploy")["id"], "the deploy")
        d.contributed = d.ta.post(f"{rt}/members", {"role": "worker", "allocation_id": d.ids["pool-v"]})
        # before it joins, the split names who pays for vision's worker
        (w2,) = [m for m in d.ta.get(f"{rt}/billing")["members"] if m["node_name"] == "w2"]
        assert (w2["project_name"], w2["charged_as"]) == ("vision", "project")
        _succeeds(d.ta, d.contributed["id"], "vision's worker joining")
        wait_for(lambda: settled(d.ta, d.ids["rt"]), 300, 1, "the runtime's runs")
        d.lines = lines
        yield d
    finally:
        d.close()


def sacct_assocs(d: Demo) -> set[tuple[str, str]]:
    out = d.slurm("sacctmgr -nP show assoc format=account,user")
    return {tuple(line.split("|")) for line in out.splitlines() if line.split("|")[1]}


def squeue(d: Demo) -> dict[str, dict]:
    out = d.slurm("squeue --noheader --all --format='%i|%u|%a|%T'")
    return {i: {"user": u, "account": a, "state": s} for i, u, a, s in (line.split("|") for line in out.splitlines())}


def test_each_project_submits_into_its_own_account_and_sees_only_its_own_jobs(world):
    d = world
    rt = f"/v1/instances/{d.ids['rt']}"
    # How a project's principals find the runtime: their project's attachments.
    (mine,) = d.sa.get(f"/v1/projects/{d.ids['project']}/attachments")["items"]
    assert (mine["instance_id"], mine["account"]) == (d.ids["rt"], "research")
    ours = d.sa.post(f"{rt}/jobs", {"name": "train", "script": SHORT})
    theirs = d.vision.post(f"{rt}/jobs", {"name": "infer", "script": SHORT})
    assert (ours["account"], ours["project_id"]) == ("research", d.ids["project"])
    assert (theirs["account"], theirs["project_id"]) == ("vision", d.ids["vision"])
    queue = squeue(d)
    assert queue[ours["id"]]["account"] == "research" and queue[theirs["id"]]["account"] == "vision"
    assert {j["id"] for j in d.sa.get(f"{rt}/jobs")["items"]} == {ours["id"]}
    assert {j["id"] for j in d.vision.get(f"{rt}/jobs")["items"]} == {theirs["id"]}
    d.sa.call("GET", f"{rt}/jobs/{theirs['id']}", expect=(404,))
    d.vision.call("POST", f"{rt}/jobs/{ours['id']}/cancel", expect=(404,))
    # Both projects' nodes serve both: the owner's reserved worker and vision's contributed one.
    assert {n["name"] for n in d.sa.get(f"{rt}/nodes")["items"]} == {"ctl", "w2"}
    d.known_jobs = {"research": ours["id"], "vision": theirs["id"]}


def test_a_submit_into_another_projects_account_needs_a_grant_and_is_audited(world):
    d = world
    rt = f"/v1/instances/{d.ids['rt']}"
    with pytest.raises(ApiError, match="cross_project_denied"):
        d.sa.post(f"{rt}/jobs", {"name": "sneak", "script": SHORT, "account": "vision"})
    sa_id = d.sa.get("/v1/me")["id"]
    runtime_user = next(i["name"] for i in d.ta.get(f"{rt}/access-map")["identities"]
                        if i["principal"] == f"service_account:{sa_id}")
    assert ("vision", runtime_user) not in sacct_assocs(d)
    grant = d.ta.post(f"{rt}/submit-grants", {"principal_kind": "service_account", "principal_id": sa_id,
                                              "target_project_id": d.ids["vision"], "reason": "shared benchmark"})
    assert grant["account"] == "vision" and grant["operation_ids"]
    wait_for(lambda: settled(d.ta, d.ids["rt"]), 300, 1, "the grant's access sync")
    assert ("vision", runtime_user) in sacct_assocs(d)  # exactly the association the grant names
    assert ("research", runtime_user) in sacct_assocs(d)
    job = d.sa.post(f"{rt}/jobs", {"name": "granted", "script": SHORT, "account": "vision"})
    d.known_jobs["granted"] = job["id"]
    queued = squeue(d)[job["id"]]
    assert (queued["user"], queued["account"]) == (runtime_user, "vision")
    audit = d.ta.get(f"/v1/audit?tenant_id={d.ids['tenant']}&limit=500")["items"]
    actions = [(a["action"], (a.get("after") or {}).get("account")) for a in audit]
    assert ("apps.shared_runtime.grant", "vision") in actions and ("scheduler.job.submit", "vision") in actions


def test_hand_made_drift_shows_in_the_report_and_a_sync_repairs_it(world):
    d = world
    rt = f"/v1/instances/{d.ids['rt']}"
    wait_for(lambda: not squeue(d), 120, 1, "the short jobs to end")
    assert d.ta.get(f"{rt}/access-drift")["in_sync"]
    vision_sa = next(i["name"] for i in d.ta.get(f"{rt}/access-map")["identities"]
                     if i["accounts"] == ["vision"] and i["principal"].startswith("service_account:"))
    d.slurm(f"sacctmgr -i delete user name={vision_sa} account=vision")
    d.slurm("sacctmgr -i add user name=root account=research")
    drift = d.ta.get(f"{rt}/access-drift")
    assert not drift["in_sync"]
    assert drift["missing_associations"] == [{"account": "vision", "user": vision_sa}]
    assert drift["unexpected_associations"] == [{"account": "research", "user": "root"}]
    op = d.ta.post(f"{rt}/access-sync")
    _succeeds(d.ta, op["id"], "the repairing access sync")
    assert d.ta.get(f"{rt}/access-drift")["in_sync"]
    assert ("vision", vision_sa) in sacct_assocs(d) and ("research", "root") not in sacct_assocs(d)


def window() -> str:
    """Today and tomorrow (UTC): every record of this test's runtime."""
    today = datetime.now(UTC).date()
    return f"start={today - timedelta(days=1)}T00:00:00&end={today + timedelta(days=1)}T00:00:00"


def usage(api, project_id: str, dimension: str) -> list[dict]:
    return api.get(f"/v1/projects/{project_id}/usage?{window()}&dimension={dimension}&limit=500")["items"]


def test_usage_records_match_sacct_to_the_second_and_split_between_owner_and_projects(world):
    d = world
    jobs = d.known_jobs  # ended by now (the drift test waited for an empty queue)
    projects = {"research": d.ids["project"], "vision": d.ids["vision"], "granted": d.ids["vision"]}

    def recorded() -> dict[str, dict] | None:
        found = {name: next((r for r in usage(d.ta, projects[name], "job") if r["job_id"] == jobs[name]), None)
                 for name in jobs}
        return found if all(found.values()) else None

    records = wait_for(recorded, 120, 1, "the metering pass to record the known jobs")
    out = d.slurm(f"SLURM_TIME_FORMAT=%s sacct -X -P -n -j {','.join(jobs.values())} "
                  "-o JobIDRaw,Account,User,ElapsedRaw,AllocCPUS,Start,End")
    sacct = {line.split("|")[0]: line.split("|") for line in out.splitlines()}
    for name, record in records.items():
        job_id, account, user, elapsed, cpus, start, end = sacct[jobs[name]]
        assert (record["account"], record["runtime_user"], record["charged_as"]) == (account, user, "project")
        assert (record["elapsed_seconds"], record["cpus"]) == (int(elapsed), int(cpus))
        assert record["core_seconds"] == int(elapsed) * int(cpus) and record["gpu_seconds"] == 0
        for field, unix in (("start_time", start), ("end_time", end)):
            assert int(datetime.fromisoformat(record[field]).timestamp()) == int(unix), (name, field)
    assert records["research"]["project_id"] == d.ids["project"] and records["granted"]["account"] == "vision"

    # Member time: the controller and the owner's reserved worker are the owner's, vision's worker is vision's.
    def members_recorded() -> dict | None:
        owner = {(r["node_name"], r["role"], r["charged_as"]) for r in usage(d.ta, d.ids["shared"], "member_seconds")}
        theirs = {(r["node_name"], r["role"], r["charged_as"]) for r in usage(d.ta, d.ids["vision"], "member_seconds")}
        return (owner, theirs) if owner and theirs else None

    owner, theirs = wait_for(members_recorded, 60, 1, "member time")
    assert owner == {("ctl", "controller", "tenant_shared_owner"), ("ctl", "worker", "tenant_shared_owner")}
    assert theirs == {("w2", "worker", "project")}
    assert usage(d.ta, d.ids["project"], "member_seconds") == []  # research contributed nothing
    tenant = d.ta.get(f"/v1/tenants/{d.ids['tenant']}/usage?{window()}")
    lines = {(line["project_name"], line["charged_as"], line["dimension"]) for line in tenant["lines"]}
    assert {("shared", "tenant_shared_owner", "member_seconds"), ("vision", "project", "member_seconds"),
            ("research", "project", "job"), ("vision", "project", "job")} <= lines
    csv = d.ta.http.get(f"/v1/projects/{d.ids['vision']}/usage?{window()}&format=csv",
                        headers={"Authorization": f"Bearer {d.ta.token}"})
    assert csv.status_code == 200 and jobs["vision"] in csv.text and csv.text.startswith("id,")


def test_detaching_a_project_waits_for_its_jobs_then_removes_its_account_and_its_worker(world):
    d = world
    rt = f"/v1/instances/{d.ids['rt']}"
    job = d.vision.post(f"{rt}/jobs", {"name": "long", "script": LONG})
    with pytest.raises(ApiError, match="attachment_has_jobs"):
        d.ta.post(f"{rt}/attachments/{d.ids['vision']}/detach", {"reason": "moving out"})
    d.vision.post(f"{rt}/jobs/{job['id']}/cancel")
    wait_for(lambda: job["id"] not in squeue(d), 60, 0.5, "the cancel")
    detached = d.ta.post(f"{rt}/attachments/{d.ids['vision']}/detach", {"reason": "moving out"})
    assert detached["status"] == "detached" and len(detached["operation_ids"]) == 2
    d.vision.call("GET", f"{rt}/jobs", expect=(404,))  # the API enforces it at once
    wait_for(lambda: settled(d.ta, d.ids["rt"]), 600, 1, "the worker's removal and the access sync")
    assert "vision" not in d.slurm("sacctmgr -nP show account format=account").split()
    assert not [a for a in sacct_assocs(d) if a[0] == "vision"]
    assert d.slurm("sinfo -N -h -o %N").split() == ["ctl"]
    removed = next(m for m in d.ta.get(f"{rt}/members")["items"] if m["node_name"] == "w2")
    assert removed["status"] == "removed"
    assert d.sa.post(f"{rt}/jobs", {"name": "after", "script": SHORT})["account"] == "research"  # research goes on
    assert d.ta.get(f"{rt}/submit-grants")["items"] == []  # the grant into vision's account went with it
    assert d.ta.get(f"{rt}/access-drift")["in_sync"]

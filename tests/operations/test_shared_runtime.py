"""A tenant-shared runtime (docs/tenant-shared.md) of the test app, served by the toy scheduler on loopback: who
may attach, contribute and grant; each attached project's principals submit into its own account and see only
its jobs; a grant adds exactly one account to one identity; detaching waits for the project's jobs and removes
its members. Runs are only queued here (no worker): the real runtime is tests/e2e/test_api_slurm_shared.py."""

from __future__ import annotations

import pytest
from api.world import register_allocation
from gpuaas_api.access.service import compare

from .helpers import TEST_APP, running_with_scheduler_key
from .toy_scheduler import ToyScheduler, point_at

SA, OSA, PADM, OPADM, TA = "service_account", "other_service_account", "project_admin", "other_project_admin", \
    "tenant_admin"
SCRIPT = "#!/bin/sh\ntrue\n"


def me(ops, actor: str) -> str:
    return ops.w.call(actor, "GET", "/v1/me", 200).json()["id"]


def identities(ops, iid: str) -> dict[str, list[str]]:
    """principal -> its accounts, from the access map the next run gets."""
    access_map = ops.w.call(TA, "GET", f"/v1/instances/{iid}/access-map", 200).json()
    return {i["principal"]: i["accounts"] for i in access_map["identities"]}


@pytest.fixture
def shared(ops):
    """A running shared runtime owned by project A1, project A2 on its allowlist, served by a toy scheduler."""
    ops.w.call("platform_admin", "POST", f"/v1/projects/{ops.ids['project_a2']}/entitlements", 201,
               json={"app_slug": TEST_APP})
    body = {"name": "shared", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops"]],
            "control_plane_scope": "tenant", "attachable_project_ids": [ops.ids["project_a2"]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]}
    ops.w.call(PADM, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 403, json=body)
    instance = ops.w.call(TA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 201, json=body).json()
    key = running_with_scheduler_key(ops, instance["id"])
    with ToyScheduler(key, instance["id"], nodes=["n1"]) as toy:
        point_at(ops.sql, instance["id"], toy.port)
        yield instance["id"], toy


def test_attached_projects_submit_into_their_own_accounts_and_a_grant_adds_exactly_one(ops, shared):
    iid, toy = shared
    rt = f"/v1/instances/{iid}"
    a1, a2 = (ops.w.call(TA, "GET", f"/v1/projects/{ops.ids[p]}", 200).json()["name"] for p in ("project_a1",
                                                                                                   "project_a2"))
    # Before A2 is attached its service account cannot even see the runtime.
    ops.w.call(OSA, "POST", f"{rt}/jobs", 404, json={"name": "early", "script": SCRIPT})
    for actor, code in ((PADM, 403), (OPADM, 404)):  # only a tenant admin attaches
        ops.w.call(actor, "POST", f"{rt}/attachments", code, json={"project_id": ops.ids["project_a2"], "reason": "x"})
    attached = ops.w.call(TA, "POST", f"{rt}/attachments", 201,
                          json={"project_id": ops.ids["project_a2"], "reason": "vision joins"}).json()
    assert (attached["account"], attached["owner"], attached["status"]) == (a2, False, "attached")
    assert len(attached["operation_ids"]) == 1  # the access_sync that creates its account
    again = ops.w.call(TA, "POST", f"{rt}/attachments", 409, json={"project_id": ops.ids["project_a2"], "reason": "x"})
    assert again.json()["error"]["code"] == "already_attached"
    project = ops.w.call(TA, "POST", f"/v1/tenants/{ops.ids['tenant_a']}/projects", 201,
                         json={"name": "not-listed"}).json()["id"]
    error = ops.w.call(TA, "POST", f"{rt}/attachments", 403, json={"project_id": project, "reason": "x"}).json()
    assert error["error"]["code"] == "project_not_allowlisted"
    ops.w.call(TA, "POST", f"{rt}/attachments", 404, json={"project_id": ops.ids["project_b1"], "reason": "x"})
    assert [a["account"] for a in ops.w.call(OSA, "GET", f"/v1/projects/{ops.ids['project_a2']}/attachments",
                                             200).json()["items"]] == [a2]

    sa, osa, ta = f"service_account:{me(ops, SA)}", f"service_account:{me(ops, OSA)}", f"user:{me(ops, TA)}"
    before = identities(ops, iid)
    assert (before[sa], before[osa], before[ta]) == ([a1], [a2], [a1, a2])

    ours = ops.w.call(SA, "POST", f"{rt}/jobs", 201, json={"name": "ours", "script": SCRIPT}).json()
    theirs = ops.w.call(OSA, "POST", f"{rt}/jobs", 201, json={"name": "theirs", "script": SCRIPT}).json()
    assert (ours["account"], ours["project_id"]) == (a1, ops.ids["project_a1"])
    assert (theirs["account"], theirs["project_id"]) == (a2, ops.ids["project_a2"])
    assert [j["id"] for j in ops.w.call(SA, "GET", f"{rt}/jobs", 200).json()["items"]] == [ours["id"]]
    assert [j["id"] for j in ops.w.call(OSA, "GET", f"{rt}/jobs", 200).json()["items"]] == [theirs["id"]]
    ops.w.call(OSA, "GET", f"{rt}/jobs/{ours['id']}", 404)
    assert {j["id"] for j in ops.w.call(TA, "GET", f"{rt}/jobs", 200).json()["items"]} == {ours["id"], theirs["id"]}
    # A caller of several attached projects names the account; nodes are operated from the owner project only.
    error = ops.w.call(TA, "POST", f"{rt}/jobs", 422, json={"name": "which", "script": SCRIPT}).json()["error"]
    assert error["code"] == "account_required" and error["details"]["accounts"] == [a1, a2]
    ops.w.call(OPADM, "POST", f"{rt}/nodes/n1/drain", 404, json={"reason": "not theirs"})
    assert ops.w.call(OSA, "GET", f"{rt}/nodes", 200).json()["items"][0]["name"] == "n1"

    # Cross-project submission: denied, granted for one principal into one account, revoked.
    error = ops.w.call(SA, "POST", f"{rt}/jobs", 403, json={"name": "x", "script": SCRIPT, "account": a2}).json()
    assert error["error"]["code"] == "cross_project_denied"
    ops.w.call(SA, "POST", f"{rt}/jobs", 403, json={"name": "x", "script": SCRIPT, "account": "root"})
    grant_body = {"principal_kind": "service_account", "principal_id": me(ops, SA),
                  "target_project_id": ops.ids["project_a2"], "reason": "shared benchmark"}
    ops.w.call(PADM, "POST", f"{rt}/submit-grants", 403, json=grant_body)
    grant = ops.w.call(TA, "POST", f"{rt}/submit-grants", 201, json=grant_body).json()
    assert grant["account"] == a2
    after = identities(ops, iid)
    assert after[sa] == [a1, a2] and {k: v for k, v in after.items() if k != sa} == {
        k: v for k, v in before.items() if k != sa}  # exactly one association more
    ops.w.call(TA, "POST", f"{rt}/submit-grants", 409, json=grant_body)  # already allowed
    ops.w.call(TA, "POST", f"{rt}/submit-grants", 409, json=grant_body | {"target_project_id": ops.ids["project_a1"]})
    nobody = ops.w.call(TA, "POST", f"/v1/tenants/{ops.ids['tenant_a']}/users", 201,
                        json={"email": "nobody@example.com"}).json()["id"]
    error = ops.w.call(TA, "POST", f"{rt}/submit-grants", 422,
                       json=grant_body | {"principal_kind": "user", "principal_id": nobody}).json()["error"]
    assert error["code"] == "principal_not_served"
    granted = ops.w.call(SA, "POST", f"{rt}/jobs", 201, json={"name": "g", "script": SCRIPT, "account": a2}).json()
    assert granted["account"] == a2 and toy.jobs[int(granted["id"])]["account"] == a2
    ops.w.call(OSA, "POST", f"{rt}/jobs/{granted['id']}/cancel", 200)  # A2's job: A2's to cancel (and see)
    ops.w.call(TA, "POST", f"{rt}/submit-grants/{grant['id']}/revoke", 200)
    assert identities(ops, iid)[sa] == [a1]
    ops.w.call(SA, "POST", f"{rt}/jobs", 403, json={"name": "x", "script": SCRIPT, "account": a2})
    # Filed under the project each concerns: A2 (attached, and whose account the grant opened).
    audit = ops.w.call(TA, "GET", "/v1/audit", 200, params={"project_id": ops.ids["project_a2"],
                                                             "limit": 500}).json()["items"]
    assert {"apps.shared_runtime.attach", "apps.shared_runtime.grant", "apps.shared_runtime.revoke"} <= {
        a["action"] for a in audit}


def test_contributed_members_are_charged_to_their_project_and_leave_with_it(ops, shared):
    iid, toy = shared
    rt = f"/v1/instances/{iid}"
    ops.w.call(TA, "POST", f"{rt}/attachments", 201, json={"project_id": ops.ids["project_a2"], "reason": "x"})
    a2_alloc = register_allocation(ops.w, "project_a2", "a2-pool", hosts=2)["id"]
    b1_alloc = register_allocation(ops.w, "project_b1", "b1-pool", hosts=1)["id"]
    ops.w.call(PADM, "POST", f"{rt}/members", 403, json={"role": "worker", "allocation_id": a2_alloc})
    error = ops.w.call(TA, "POST", f"{rt}/members", 422, json={"role": "worker", "allocation_id": b1_alloc}).json()
    assert error["error"]["code"] == "allocation.unknown"
    op = ops.w.call(TA, "POST", f"{rt}/members", 202, json={"role": "worker", "allocation_id": a2_alloc}).json()
    split = {(m["role"], m["allocation_id"]): m for m in ops.w.call(TA, "GET", f"{rt}/billing", 200).json()["members"]}
    assert (split[("worker", a2_alloc)]["project_id"], split[("worker", a2_alloc)]["charged_as"]) == (
        ops.ids["project_a2"], "project")
    assert {m["charged_as"] for k, m in split.items() if k != ("worker", a2_alloc)} == {"tenant_shared_owner"}

    # Its pending member_add keeps the project attached until it ends or is cancelled.
    error = ops.w.call(TA, "POST", f"{rt}/attachments/{ops.ids['project_a2']}/detach", 409,
                       json={"reason": "x"}).json()["error"]
    assert error["code"] == "operation_open"
    ops.sql("UPDATE operations SET status = 'succeeded', finished_at = now() WHERE id = %s RETURNING id", (op["id"],))
    ops.sql("UPDATE app_instance_members SET status = 'active' WHERE instance_id = %s RETURNING id", (iid,))
    job = ops.w.call(OSA, "POST", f"{rt}/jobs", 201, json={"name": "busy", "script": SCRIPT}).json()
    error = ops.w.call(TA, "POST", f"{rt}/attachments/{ops.ids['project_a2']}/detach", 409,
                       json={"reason": "x"}).json()["error"]
    assert error["code"] == "attachment_has_jobs" and error["details"]["job_ids"] == [job["id"]]
    ops.w.call(OSA, "POST", f"{rt}/jobs/{job['id']}/cancel", 200)
    ops.w.call(TA, "POST", f"{rt}/attachments/{ops.ids['project_a1']}/detach", 409, json={"reason": "x"})  # owner
    detached = ops.w.call(TA, "POST", f"{rt}/attachments/{ops.ids['project_a2']}/detach", 200,
                          json={"reason": "moving out"}).json()
    assert detached["status"] == "detached"
    queued = {o["id"]: o for o in ops.w.call(TA, "GET", f"{rt}/operations", 200).json()["items"]}
    assert "member_remove" in [queued[o]["kind"] for o in detached["operation_ids"]]
    # the access_sync that removes its account: this detach's, or the attach's still queued (it reads the map then)
    assert [o["kind"] for o in queued.values() if o["status"] == "queued"].count("access_sync") == 1
    ops.w.call(OSA, "GET", f"{rt}/jobs", 404)  # out of the runtime at once
    assert [i["project_id"] for i in ops.w.call(TA, "GET", f"{rt}/access-map", 200).json()["accounts"]] == [
        ops.ids["project_a1"]]


def test_taking_an_association_away_waits_for_its_jobs_and_grants_do_not_outlive_their_project(ops, shared):
    iid, toy = shared
    rt = f"/v1/instances/{iid}"
    a1 = ops.w.call(TA, "GET", f"/v1/projects/{ops.ids['project_a1']}", 200).json()["name"]
    a2 = ops.w.call(TA, "GET", f"/v1/projects/{ops.ids['project_a2']}", 200).json()["name"]
    ops.w.call(TA, "POST", f"{rt}/attachments", 201, json={"project_id": ops.ids["project_a2"], "reason": "x"})
    # Audit rows are the project's they concern: A2's attach and A2's job under A2, not the runtime's owner.
    job = ops.w.call(OSA, "POST", f"{rt}/jobs", 201, json={"name": "theirs", "script": SCRIPT}).json()
    rows = ops.w.call(TA, "GET", "/v1/audit", 200, params={"project_id": ops.ids["project_a2"], "limit": 500}).json()
    assert {"apps.shared_runtime.attach", "scheduler.job.submit"} <= {a["action"] for a in rows["items"]}
    owner_rows = ops.w.call(TA, "GET", "/v1/audit", 200, params={"project_id": ops.ids["project_a1"],
                                                                   "limit": 500}).json()["items"]
    assert not [a for a in owner_rows if a["action"] == "scheduler.job.submit"]
    ops.w.call(OSA, "POST", f"{rt}/jobs/{job['id']}/cancel", 200)

    # A2's service account, granted into A1's account, runs a job there: revoking or detaching would end it.
    grant = ops.w.call(TA, "POST", f"{rt}/submit-grants", 201, json={
        "principal_kind": "service_account", "principal_id": me(ops, OSA), "target_project_id": ops.ids["project_a1"],
        "reason": "x"}).json()
    granted = ops.w.call(OSA, "POST", f"{rt}/jobs", 201, json={"name": "g", "script": SCRIPT, "account": a1}).json()
    error = ops.w.call(TA, "POST", f"{rt}/submit-grants/{grant['id']}/revoke", 409).json()["error"]
    assert error["code"] == "grant_has_jobs" and error["details"]["job_ids"] == [granted["id"]]
    error = ops.w.call(TA, "POST", f"{rt}/attachments/{ops.ids['project_a2']}/detach", 409,
                       json={"reason": "x"}).json()["error"]
    assert error["code"] == "attachment_has_jobs" and error["details"]["accounts"] == [a1]
    ops.w.call(SA, "POST", f"{rt}/jobs/{granted['id']}/cancel", 200)  # A1's job now: A1's principals cancel it
    # With no job left under it, the detach goes through and takes the grant (A2 served its principal) with it.
    detached = ops.w.call(TA, "POST", f"{rt}/attachments/{ops.ids['project_a2']}/detach", 200,
                          json={"reason": "x"}).json()
    assert detached["status"] == "detached"
    assert ops.w.call(TA, "GET", f"{rt}/submit-grants", 200).json()["items"] == []
    assert ops.w.call(TA, "GET", f"{rt}/submit-grants/{grant['id']}", 200).json()["revoked_at"]
    # Attached again, A2 gets its own account back, and no grant comes back with it.
    ops.w.call(TA, "POST", f"{rt}/attachments", 201, json={"project_id": ops.ids["project_a2"], "reason": "back"})
    assert identities(ops, iid)[f"service_account:{me(ops, OSA)}"] == [a2]

    # The allowlist is the tenant admin's to change, on a shared runtime only.
    project = ops.w.call(TA, "POST", f"/v1/tenants/{ops.ids['tenant_a']}/projects", 201,
                         json={"name": "late-joiner"}).json()["id"]
    ops.w.call(PADM, "PATCH", rt, 403, json={"attachable_project_ids": [project]})
    allowlist = [ops.ids["project_a2"], project]
    updated = ops.w.call(TA, "PATCH", rt, 200, json={"attachable_project_ids": allowlist}).json()
    assert updated["attachable_project_ids"] == allowlist
    ops.w.call(TA, "PATCH", rt, 422, json={"attachable_project_ids": [ops.ids["project_b1"]]})
    plain = ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 201, json={
        "name": "plain", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops2"]],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]}).json()
    error = ops.w.call(TA, "PATCH", f"/v1/instances/{plain['id']}", 409,
                       json={"attachable_project_ids": [project]}).json()["error"]
    assert error["code"] == "not_shared"
    ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 422, json={
        "name": "labelled", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops2"]], "environment": "prod"})


def test_the_drift_report_names_what_differs_and_leaves_foreign_accounts_alone():
    intent = {"accounts": [{"name": "research", "project_id": "p1"}, {"name": "vision", "project_id": "p2"}],
              "identities": [{"name": "alice", "accounts": ["research", "vision"]}, {"name": "bob",
                                                                                      "accounts": ["vision"]}]}
    mark = "gpuaas project "
    actual = {"accounts": [{"name": "research", "description": mark + "p1"}, {"name": "old", "description": mark},
                           {"name": "physics", "description": "made by the site"}],
              "associations": [{"account": "research", "user": "alice"}, {"account": "research", "user": "root"},
                               {"account": "physics", "user": "carol"}]}
    report = compare(intent, actual)
    assert report == {"in_sync": False, "missing_accounts": ["vision"], "unexpected_accounts": ["old"],
                      "foreign_accounts": [], "missing_associations": [{"account": "vision", "user": "alice"},
                                                                       {"account": "vision", "user": "bob"}],
                      "unexpected_associations": [{"account": "research", "user": "root"}]}
    actual["accounts"] += [{"name": "vision", "description": "someone else's"}]
    assert compare(intent, actual)["foreign_accounts"] == ["vision"]
    synced = {"accounts": [{"name": "research", "description": mark + "p1"}, {"name": "vision", "description": mark}],
              "associations": [{"account": "research", "user": "alice"}, {"account": "vision", "user": "alice"},
                               {"account": "vision", "user": "bob"}, {"account": "physics", "user": "carol"}]}
    assert compare(intent, synced)["in_sync"] is True

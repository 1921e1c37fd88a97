"""Smoke gates and canary instances (issue 29 item 2, the version half; docs/control-service.md "Smoke runs and
canary instances"): a version's moves by hand against the promotion settings, the smoke gate route's checks, and
the gate's steps through the operation queue. Real PostgreSQL and the real app; no hosts: where a run would go,
the test takes the operation off the queue as a worker does (claim), moves the instance as the executor would and
records the run's outcome (finish). tests/e2e/test_smoke_gate.py runs the same gate on a real host."""

from __future__ import annotations

import psycopg
import pytest
from gpuaas_api.catalog import smoke
from gpuaas_api.config import OperationSettings
from gpuaas_api.instances import service as instances
from gpuaas_api.operations import service as operations

from .world import SLURM_ADAPTER, SLURM_COMPAT, World, register_allocation

SMOKE_VERSION = "2.0.0"


@pytest.fixture
def w(world: World) -> World:
    artifact = world.call("platform_admin", "GET", "/v1/catalog/apps/slurm/versions/1.0.0", 200).json()["artifact_id"]
    world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/versions", 201, json={
        "version": SMOKE_VERSION, "artifact_id": artifact, "compatibility": SLURM_COMPAT, "adapter": SLURM_ADAPTER})
    world.ids["alloc_smoke"] = register_allocation(world, "project_a1", "alloc-smoke", hosts=2)["id"]
    # A developer of tenant A who publishes to the platform catalog and runs instances in project A1.
    user = world.call("platform_admin", "POST", f"/v1/tenants/{world.ids['tenant_a']}/users", 201,
                      json={"email": "smoker@example.com"}).json()
    world.call("platform_admin", "POST", "/v1/role-bindings", 201, json={
        "principal_kind": "user", "principal_id": user["id"], "role": "catalog_publisher"})
    world.tokens["publisher"] = world.call("platform_admin", "POST", f"/v1/users/{user['id']}/tokens", 201,
                                           json={"name": "publish"}).json()["token"]
    world.ids["user_publisher"] = user["id"]
    return world


def move(w: World, actor: str, target: str, expect: int, **extra) -> dict:
    return w.call(actor, "POST", f"/v1/catalog/apps/slurm/versions/{SMOKE_VERSION}/transitions", expect,
                  json={"to": target, "reason": "smoke gate tests"} | extra).json()


def start_body(w: World, **extra) -> dict:
    return {"kind": "smoke", "project_id": w.ids["project_a1"], "allocation_ids": [w.ids["alloc_smoke"]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
            "reason": "smoke run before canary"} | extra


def run(database, op_id: str, instance_id: str, moves: tuple[str, ...], status: str, message: str = "") -> None:
    """A worker's part, without hosts: claim the operation, move the instance as its run would, record the end."""
    with database.transaction() as conn:
        claimed = operations.claim(conn, "test-worker", 60, "localhost")
        assert str(claimed["id"]) == op_id, claimed
        for target in moves:
            instances.transition_instance(conn, instance_id, target, reason="test worker")
        if claimed["kind"] == "decommission":  # its hosts are free again
            for m in conn.execute("SELECT id FROM app_instance_members WHERE instance_id = %s", (instance_id,)):
                instances.set_member_status(conn, m["id"], "removed", reason="test worker")
        error = {"code": "run_failed", "message": message} if status == "failed" else None
        assert operations.finish(conn, claimed["id"], "test-worker", status, error=error)


def events(database, gate_id: str) -> list[dict]:
    with database.transaction() as conn:
        return conn.execute("SELECT * FROM catalog_events WHERE gate_id = %s ORDER BY id", (gate_id,)).fetchall()


def test_a_version_moves_by_hand_only_past_its_gates(w: World, database):
    for target in ("canary", "active"):
        error = move(w, "platform_admin", target, 409)["error"]
        assert error["code"] == "gate_required" and error["details"]["gate"] == "smoke", error
    # Skipping is the platform admin's alone, and recorded.
    assert move(w, "publisher", "canary", 403, skip_gates=True)["error"]["code"] == "forbidden"
    assert move(w, "platform_admin", "canary", 200, skip_gates=True)["status"] == "canary"
    with database.transaction() as conn:
        (skipped,) = conn.execute("SELECT * FROM catalog_events WHERE type = 'gate.skipped' AND "
                                  "payload->>'reason' = 'smoke gate tests'").fetchall()
    assert skipped["payload"]["gates"] == ["smoke"] and skipped["payload"]["to"] == "canary", skipped

    error = move(w, "publisher", "active", 409)["error"]
    assert error["code"] == "canary_instances_short" and error["details"] == {"have": 0, "need": 1}, error
    # A tenant's instance opted in to canary, deployed successfully: the one canary instance needed.
    canary = w.call("project_admin", "POST", f"/v1/projects/{w.ids['project_a1']}/instances", 201, json={
        "name": "early", "app_slug": "slurm", "version": SMOKE_VERSION, "allocation_ids": [w.ids["alloc_smoke"]],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}], "canary": True}).json()
    deploy = w.call("project_admin", "POST", f"/v1/instances/{canary['id']}/deploy", 202).json()
    assert move(w, "publisher", "active", 409)["error"]["details"]["have"] == 0  # queued is not succeeded
    run(database, deploy["id"], canary["id"], ("starting", "running"), "succeeded")
    assert move(w, "publisher", "active", 200)["status"] == "active"


def test_the_smoke_gate_route_checks_what_creating_an_instance_there_needs(w: World):
    url = f"/v1/catalog/apps/slurm/versions/{SMOKE_VERSION}/gates"
    # Publishing is not enough: the publisher holds no role in the project yet (it does not see it: 404), the
    # platform admin none either (it sees the project, but runs no instances of tenants).
    assert w.call("publisher", "POST", url, 404, json=start_body(w)).json()["error"]["details"]["kind"] == "project"
    refused = w.call("platform_admin", "POST", url, 403, json=start_body(w)).json()["error"]
    assert refused["details"]["permission"] == "apps.instance.create", refused
    # Running instances is not enough: the project admin does not publish.
    w.call("project_admin", "POST", url, 403, json=start_body(w))
    w.call("platform_admin", "POST", "/v1/role-bindings", 201, json={
        "principal_kind": "user", "principal_id": w.ids["user_publisher"], "role": "project_admin",
        "project_id": w.ids["project_a1"]})
    # Another project's allocation, a role the adapter lacks, parameters the version's schema refuses.
    assert w.call("publisher", "POST", url, 422, json=start_body(
        w, allocation_ids=[w.ids["alloc_b1"]])).json()["error"]["code"] == "compatibility_refused"
    w.call("publisher", "POST", url, 422, json=start_body(w, topology=[{"role": "nope", "count": 1}]))
    assert w.call("publisher", "POST", url, 422, json=start_body(
        w, parameters={"not_a_parameter": 1})).json()["error"]["code"] == "invalid_parameters"
    # Not a draft: the active 1.0.0 has nothing to smoke-test.
    assert w.call("publisher", "POST", "/v1/catalog/apps/slurm/versions/1.0.0/gates", 422,
                  json=start_body(w)).json()["error"]["code"] == "illegal_transition"
    # Tenant B cannot smoke-test in tenant A's project, even as a publisher of its own catalog.
    w.call("other_tenant_admin", "POST", url, 403, json=start_body(w))
    with_project = w.call("publisher", "POST", url, 202, json=start_body(w))
    gate = with_project.json()
    assert with_project.headers["location"] == f"/v1/catalog/gates/{gate['id']}"
    assert gate["status"] == "running" and gate["kind"] == "smoke"
    # An open gate is answered again rather than a second one started.
    assert w.call("publisher", "POST", url, 202, json=start_body(w)).json()["id"] == gate["id"]


def test_a_smoke_gate_promotes_on_a_pass_and_keeps_a_failure_out(w: World, database):
    w.call("platform_admin", "POST", "/v1/role-bindings", 201, json={
        "principal_kind": "user", "principal_id": w.ids["user_publisher"], "role": "project_admin",
        "project_id": w.ids["project_a1"]})
    url = f"/v1/catalog/apps/slurm/versions/{SMOKE_VERSION}/gates"
    settings = OperationSettings()
    for outcome in ("failed", "succeeded"):
        gate = w.call("publisher", "POST", url, 202, json=start_body(w)).json()
        cid = gate["correlation_id"]
        instance_id = gate["smoke"]["instance_id"]
        (deploy,) = gate["smoke"]["operations"]
        # The smoke instance is the project's like any other, named for what it is.
        seen = w.call("project_admin", "GET", f"/v1/instances/{instance_id}", 200).json()
        assert seen["name"].startswith("smoke-2-0-0-") and seen["smoke_gate_id"] == gate["id"], seen
        assert smoke.advance(database, settings) == 0  # the deploy has not ended
        # Only the gate operates its smoke instance: a project admin's reconfigure of the draft version is refused.
        refused = w.call("project_admin", "POST", f"/v1/instances/{instance_id}/reconfigure", 409,
                         json={"parameters": {}}).json()
        assert refused["error"]["code"] == "smoke_instance", refused
        moves = ("starting", "running") if outcome == "succeeded" else ("starting", "failed")
        run(database, deploy["id"], instance_id, moves, outcome, "refused image example@sha256:00")
        assert smoke.advance(database, settings) == 1
        with database.transaction() as conn:
            ops = conn.execute("SELECT * FROM operations WHERE instance_id = %s ORDER BY seq",
                               (instance_id,)).fetchall()
        assert [o["kind"] for o in ops] == ["deploy", "decommission"]
        assert {o["correlation_id"] for o in ops} == {cid}
        run(database, str(ops[1]["id"]), instance_id, ("stopping", "stopped"), "succeeded")
        assert smoke.advance(database, settings) == 1
        with database.transaction() as conn:
            done = smoke.get_gate(conn, gate["id"])
        version = w.call("publisher", "GET", f"/v1/catalog/apps/slurm/versions/{SMOKE_VERSION}", 200).json()
        types = [(e["type"], e["correlation_id"]) for e in events(database, gate["id"])]
        assert [o["status"] for o in done["smoke"]["operations"]] == [outcome, "succeeded"]
        # Torn down, the smoke instance is deleted (out of the quota); its operations stay readable.
        assert done["smoke"]["instance_deleted"], done
        w.call("project_admin", "GET", f"/v1/instances/{instance_id}", 404)
        assert len(w.call("project_admin", "GET", f"/v1/instances/{instance_id}/operations", 200).json()["items"]) == 2
        if outcome == "failed":
            assert done["status"] == "failed" and "refused image example@sha256:00" in done["reason"], done
            assert version["status"] == "draft"
            assert types == [("gate.started", cid), ("gate.failed", cid)]
        else:
            assert done["status"] == "passed" and done["reason"] is None and done["smoke"]["promoted"], done
            assert version["status"] == "canary"
            assert types == [("gate.started", cid), ("gate.passed", cid)]
    # What ran is the project's: another tenant (the platform app is in its catalog too) and the platform admin read
    # the outcome alone, in the gate and in its events; the project's own readers read all of it.
    failed_gate = w.call("publisher", "GET", "/v1/catalog/apps/slurm/gates?kind=smoke", 200).json()["items"][0]
    assert failed_gate["smoke"]["project_id"] == w.ids["project_a1"] and "refused image" in failed_gate["reason"]
    assert w.call("project_member", "GET", f"/v1/catalog/gates/{failed_gate['id']}", 200).json() == failed_gate
    for outsider in ("other_tenant_admin", "platform_admin"):
        seen = w.call(outsider, "GET", f"/v1/catalog/gates/{failed_gate['id']}", 200).json()
        assert seen["status"] == "failed" and seen["smoke"] is None and seen["requested_by"] is None, seen
        assert seen["reason"] == smoke.HIDDEN_REASON
        told = w.call(outsider, "GET", "/v1/catalog/apps/slurm/events?type=gate.failed", 200).json()["items"]
        assert [e["payload"] for e in told] == [{"kind": "smoke", "version": SMOKE_VERSION}], told
        listed = w.call(outsider, "GET", "/v1/catalog/apps/slurm/gates?kind=smoke", 200).text
        assert w.ids["project_a1"] not in listed and "refused" not in listed
        assert failed_gate["smoke"]["instance_id"] not in listed and instance_id not in listed
    # A smoke instance's deploy is not a canary instance.
    error = move(w, "publisher", "active", 409)["error"]
    assert error["code"] == "canary_instances_short" and error["details"]["have"] == 0, error
    assert smoke.advance(database, settings) == 0


def test_a_smoke_deploy_canceled_before_it_ran_fails_the_gate_and_deletes_its_instance(w: World, database):
    w.call("platform_admin", "POST", "/v1/role-bindings", 201, json={
        "principal_kind": "user", "principal_id": w.ids["user_publisher"], "role": "project_admin",
        "project_id": w.ids["project_a1"]})
    gate = w.call("publisher", "POST", f"/v1/catalog/apps/slurm/versions/{SMOKE_VERSION}/gates", 202,
                  json=start_body(w)).json()
    (deploy,) = gate["smoke"]["operations"]
    assert w.call("project_admin", "POST", f"/v1/operations/{deploy['id']}/cancel", 202).json()["status"] == "canceled"
    assert smoke.advance(database, OperationSettings()) == 1
    with database.transaction() as conn:
        done = smoke.get_gate(conn, gate["id"])
    assert done["status"] == "failed" and done["reason"].startswith("deploy canceled; decommission refused"), done
    assert done["smoke"]["instance_deleted"], done
    # Deleted, the instance of a draft version cannot be deployed later by anyone.
    w.call("project_admin", "GET", f"/v1/instances/{gate['smoke']['instance_id']}", 404)
    assert w.call("publisher", "GET", f"/v1/catalog/apps/slurm/versions/{SMOKE_VERSION}", 200).json()["status"] == \
        "draft"


def test_a_broken_step_fails_the_gate_and_decommissions_its_instance_and_a_lost_database_waits(
        w: World, database, monkeypatch):
    w.call("platform_admin", "POST", "/v1/role-bindings", 201, json={
        "principal_kind": "user", "principal_id": w.ids["user_publisher"], "role": "project_admin",
        "project_id": w.ids["project_a1"]})
    settings = OperationSettings()
    gate = w.call("publisher", "POST", f"/v1/catalog/apps/slurm/versions/{SMOKE_VERSION}/gates", 202,
                  json=start_body(w)).json()
    instance_id = gate["smoke"]["instance_id"]
    (deploy,) = gate["smoke"]["operations"]
    run(database, deploy["id"], instance_id, ("starting", "running"), "succeeded")

    def lost(*_args):
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(smoke, "_step", lost)
    with pytest.raises(psycopg.OperationalError):
        smoke.advance(database, settings)
    with database.transaction() as conn:
        assert smoke.get_gate(conn, gate["id"])["status"] == "running"  # the next tick takes it up again

    def broken(*_args):
        raise KeyError("operations")

    monkeypatch.setattr(smoke, "_step", broken)
    assert smoke.advance(database, settings) == 1
    with database.transaction() as conn:
        done = smoke.get_gate(conn, gate["id"])
        ops = conn.execute("SELECT kind, status, correlation_id FROM operations WHERE instance_id = %s ORDER BY seq",
                           (instance_id,)).fetchall()
    assert done["status"] == "failed" and done["reason"] == (
        "the smoke gate could not go on: KeyError; its instance's decommission was queued"), done
    # The deployed draft version is not left running on the project's hosts.
    assert [(o["kind"], o["status"]) for o in ops] == [("deploy", "succeeded"), ("decommission", "queued")]
    assert {o["correlation_id"] for o in ops} == {gate["correlation_id"]}
    assert [o["kind"] for o in done["smoke"]["operations"]] == ["deploy", "decommission"]

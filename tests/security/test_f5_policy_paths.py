"""Finding 5: policy and compatibility were checked on create only. A member add or replace from an
allocation that policy denies was accepted, an upgrade to a version from a denied registry or onto
capacity the version cannot run on was accepted, and the retire gate ignored rollback targets, so a
rollback could land on a retired artifact. Every path that binds capacity or a version now passes
the same gate."""

from __future__ import annotations

from operations.helpers import TEST_APP, make_instance, members, publish_test_app, wait_op

from .test_f3_idempotency_scope import running
from .test_f4_hosts_apart import publish_variant

SA, PA = "service_account", "platform_admin"


def refused(ops, path: str, status: int, code: str, **kw) -> dict:
    r = ops.w.call(SA, "POST", path, status, **kw)
    assert r.json()["error"]["code"] == code, r.text
    return r.json()["error"]


def deny(ops, dimension: str, values: list[str]) -> str:
    return ops.w.call(PA, "POST", "/v1/policy/overlays", 201, json={
        "scope_kind": "global", "dimension": dimension, "effect": "deny", "values": values}).json()["id"]


def test_member_add_and_replace_obey_policy(ops):
    iid = running(ops, "pol")["id"]
    denied = ops.w.call(PA, "POST", "/v1/allocations", 201, json={
        "project_id": ops.ids["project_a1"], "name": "denied", "capacity_shape": "baremetal", "gpu_count": 8,
        "region": "xx-1", "hosts": [{"name": "d1", "address": "10.97.0.1"}]}).json()
    deny(ops, "region", ["xx-1"])
    ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 403, json={
        "name": "no", "app_slug": TEST_APP, "allocation_ids": [denied["id"]]})

    err = refused(ops, f"/v1/instances/{iid}/members", 403, "policy_denied",
                  json={"role": "worker", "allocation_id": denied["id"]})
    assert err["details"]["reasons"][0]["check"] == "policy.region"
    worker = next(m for m in members(ops, iid) if m["role"] == "worker")
    refused(ops, f"/v1/instances/{iid}/members/{worker['id']}/replace", 403, "policy_denied",
            json={"allocation_id": denied["id"]})
    assert len(members(ops, iid)) == 3  # nothing was bound
    ops.w.call(SA, "POST", f"/v1/instances/{iid}/members", 202,
               json={"role": "worker", "allocation_id": ops.ids["alloc_ops2"]})


def test_upgrade_checks_policy_and_compatibility(ops):
    iid = running(ops, "up")["id"]
    denied = publish_variant(ops, "2.0.0", registry="registry.denied.example")
    deny(ops, "artifact_registry", ["registry.denied.example"])
    err = refused(ops, f"/v1/instances/{iid}/upgrade", 403, "policy_denied", json={"app_version_id": denied["id"]})
    assert err["details"]["reasons"][0]["check"] == "policy.artifact_registry"

    slices_only = publish_variant(ops, "3.0.0", compat={"requires_capacity_shape": ["gpu_slice"]})
    err = refused(ops, f"/v1/instances/{iid}/upgrade", 422, "compatibility_refused",
                  json={"app_version_id": slices_only["id"]})
    assert "compatibility.capacity_shape" in {r["check"] for r in err["details"]["reasons"]}

    one_worker = publish_variant(ops, "4.0.0", roles=[{"name": "controller", "min": 1, "max": 1},
                                                      {"name": "worker", "min": 1, "max": 1}])
    err = refused(ops, f"/v1/instances/{iid}/upgrade", 422, "compatibility_refused",
                  json={"app_version_id": one_worker["id"]})
    assert "topology.count" in {r["check"] for r in err["details"]["reasons"]}
    assert ops.sql("SELECT id FROM operations WHERE instance_id = %s", (iid,)) == []


def test_rollback_target_is_gated_and_kept_from_retirement(ops):
    instance, _ = make_instance(ops, "back")
    iid = instance["id"]
    ops.start_worker()
    deployed = wait_op(ops, ops.w.call(SA, "POST", f"/v1/instances/{iid}/deploy", 202).json()["id"])
    assert deployed["status"] == "succeeded", deployed
    newer = publish_test_app(ops.w, "1.1.0")  # another build of the app: its own artifact
    up = ops.w.call(SA, "POST", f"/v1/instances/{iid}/upgrade", 202, json={"app_version_id": newer["id"]}).json()
    assert wait_op(ops, up["id"])["status"] == "succeeded"

    # policy: the rollback target's registry is denied now
    first = ops.w.call(PA, "GET", f"/v1/catalog/apps/{TEST_APP}/versions/1.0.0", 200).json()
    registry = ops.w.call(PA, "GET", f"/v1/catalog/artifacts/{first['artifact_id']}", 200).json()["registry"]
    overlay = deny(ops, "artifact_registry", [registry])
    refused(ops, f"/v1/instances/{iid}/rollback", 403, "policy_denied")
    ops.w.call(PA, "DELETE", f"/v1/policy/overlays/{overlay}", 204)

    # retire gate: the previous version's artifact is still a rollback target
    old = ops.w.call(PA, "GET", f"/v1/catalog/apps/{TEST_APP}/versions/1.0.0", 200).json()
    transition = f"/v1/catalog/artifacts/{old['artifact_id']}/transitions"
    ops.w.call(PA, "POST", transition, 200, json={"to": "deprecated", "reason": "superseded"})
    r = ops.w.call(PA, "POST", transition, 409, json={"to": "retired", "reason": "cleanup"})
    assert r.json()["error"]["code"] == "artifact_in_use"
    # and a rollback onto an artifact that is no longer active is refused
    err = refused(ops, f"/v1/instances/{iid}/rollback", 409, "artifact_not_active")
    assert err["details"]["artifact_status"] == "deprecated"

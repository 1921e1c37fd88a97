from __future__ import annotations

from gpuaas_api.policy.rules import effective, violations

from .world import register_allocation


def overlay(world, actor, expect, **body):
    return world.call(actor, "POST", "/v1/policy/overlays", expect, json=body)


def instance_body(world, name, allocation="alloc_a1"):
    return {"name": name, "app_slug": "slurm", "allocation_ids": [world.ids[allocation]]}


def test_entitlement_is_required(world):
    pid = world.ids["project_a1"]
    world.ids["alloc_free"] = register_allocation(world, "project_a1", "alloc-free")["id"]
    world.call("platform_admin", "DELETE", f"/v1/projects/{pid}/entitlements/slurm", 204)
    r = world.call("project_admin", "POST", f"/v1/projects/{pid}/instances", 403,
                   json=instance_body(world, "x", "alloc_free"))
    assert r.json()["error"]["code"] == "not_entitled"
    world.call("platform_admin", "POST", f"/v1/projects/{pid}/entitlements", 201, json={"app_slug": "slurm"})
    world.call("project_admin", "POST", f"/v1/projects/{pid}/instances", 201,
               json=instance_body(world, "x", "alloc_free"))
    world.call("platform_admin", "POST", f"/v1/projects/{pid}/entitlements", 409, json={"app_slug": "slurm"})


def test_global_deny_cannot_be_overridden_and_overlays_only_narrow(world):
    tid, pid = world.ids["tenant_a"], world.ids["project_a1"]
    overlay(world, "platform_admin", 201, scope_kind="global", dimension="region", effect="deny", values=["cn-1"])
    overlay(world, "platform_admin", 201, scope_kind="global", dimension="region", effect="allow",
            values=["eu-west-1", "eu-west-2", "cn-1"])
    r = overlay(world, "tenant_admin", 409, scope_kind="tenant", tenant_id=tid, dimension="region",
                effect="allow", values=["eu-west-1", "cn-1"])
    assert r.json()["error"]["code"] == "overlay_widens_policy"
    assert "cannot be overridden" in r.json()["error"]["details"]["problems"][0]
    r = overlay(world, "tenant_admin", 409, scope_kind="tenant", tenant_id=tid, dimension="region",
                effect="allow", values=["us-east-1"])
    assert "only narrow" in r.json()["error"]["details"]["problems"][0]
    overlay(world, "tenant_admin", 201, scope_kind="tenant", tenant_id=tid, dimension="region", effect="allow",
            values=["eu-west-1", "eu-west-2"])
    overlay(world, "project_admin", 409, scope_kind="project", project_id=pid, dimension="region", effect="allow",
            values=["eu-west-9"])
    overlay(world, "project_admin", 201, scope_kind="project", project_id=pid, dimension="region", effect="allow",
            values=["eu-west-2"])
    # Tenant admins cannot write global policy; project admins cannot write tenant policy.
    overlay(world, "tenant_admin", 403, scope_kind="global", dimension="sku", effect="deny", values=["x"])
    overlay(world, "project_admin", 403, scope_kind="tenant", tenant_id=tid, dimension="sku", effect="deny",
            values=["x"])
    eff = world.call("project_member", "GET", f"/v1/projects/{pid}/policy/effective", 200).json()
    region = next(d for d in eff["dimensions"] if d["dimension"] == "region")
    assert region == {"dimension": "region", "allow": ["eu-west-2"], "deny": ["cn-1"]}
    # The project's only allocation is in eu-west-1, which the project overlay no longer allows.
    r = world.call("project_admin", "POST", f"/v1/projects/{pid}/instances", 403, json=instance_body(world, "y"))
    err = r.json()["error"]
    assert err["code"] == "policy_denied"
    assert err["details"]["reasons"][0]["check"] == "policy.region"
    assert "not in the allowed set ['eu-west-2']" in err["details"]["reasons"][0]["message"]
    listed = world.call("project_member", "GET", "/v1/policy/overlays", 200,
                        params={"scope_kind": "project", "project_id": pid}).json()["items"]
    assert [o["values"] for o in listed] == [["eu-west-2"]]


def test_registry_and_capacity_shape_and_sku_overlays_gate_instances(world):
    pid = world.ids["project_a1"]
    overlay(world, "platform_admin", 201, scope_kind="global", dimension="artifact_registry", effect="allow",
            values=["registry.internal"])
    r = world.call("project_admin", "POST", f"/v1/projects/{pid}/instances", 403, json=instance_body(world, "r"))
    assert r.json()["error"]["details"]["reasons"][0]["check"] == "policy.artifact_registry"
    ov = world.call("platform_admin", "GET", "/v1/policy/overlays", 200).json()["items"][0]
    world.call("platform_admin", "DELETE", f"/v1/policy/overlays/{ov['id']}", 204)
    overlay(world, "tenant_admin", 201, scope_kind="tenant", tenant_id=world.ids["tenant_a"],
            dimension="capacity_shape", effect="deny", values=["baremetal"])
    overlay(world, "project_admin", 201, scope_kind="project", project_id=pid, dimension="sku", effect="allow",
            values=["a100-4x"])
    reasons = world.call("project_admin", "POST", f"/v1/projects/{pid}/instances", 403,
                         json=instance_body(world, "r")).json()["error"]["details"]["reasons"]
    assert {x["check"] for x in reasons} == {"policy.capacity_shape", "policy.sku"}


def test_policy_rules_unit():
    rows = [{"scope_kind": "project", "dimension": "sku", "effect": "allow", "values": ["a"]},
            {"scope_kind": "global", "dimension": "sku", "effect": "deny", "values": ["a"]}]
    assert not effective(rows)["sku"].allows("a")
    assert violations(rows, [("sku", None, "alloc x")])[0]["message"].startswith("alloc x has no sku")
    assert effective([])["region"].allows("anything")


def test_instances_in_policy_allowed_allocations_pass(world):
    pid = world.ids["project_a1"]
    overlay(world, "platform_admin", 201, scope_kind="global", dimension="region", effect="deny", values=["us-1"])
    register_allocation(world, "project_a1", "alloc-us", region="us-1")
    world.ids["alloc_eu"] = register_allocation(world, "project_a1", "alloc-eu")["id"]
    world.call("project_admin", "POST", f"/v1/projects/{pid}/instances", 201,
               json=instance_body(world, "eu", "alloc_eu"))

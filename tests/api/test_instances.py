from __future__ import annotations

import itertools
from uuid import UUID

import pytest
from gpuaas_api.errors import ApiError
from gpuaas_api.iam.auth import SYSTEM
from gpuaas_api.instances import service
from gpuaas_api.instances.rules import INSTANCE_TRANSITIONS, MEMBER_TRANSITIONS

from .world import SLURM_ADAPTER, create_instance, publish_app, register_allocation

STATUSES = list(INSTANCE_TRANSITIONS)
# Shortest legal path from created to each status.
PATH = {"created": [], "starting": ["starting"], "running": ["starting", "running"],
        "degraded": ["starting", "running", "degraded"],
        "stopping": ["starting", "running", "stopping"], "stopped": ["starting", "running", "stopping", "stopped"],
        "failed": ["failed"]}
LEGAL = {("created", "starting"), ("created", "failed"), ("starting", "running"), ("starting", "failed"),
         ("starting", "stopping"), ("running", "stopping"), ("running", "failed"), ("stopping", "stopped"),
         ("stopping", "failed"), ("failed", "stopping"), ("failed", "starting"), ("starting", "degraded"),
         ("running", "degraded"), ("degraded", "running"), ("degraded", "stopping"), ("degraded", "failed")}
# Legal for a health check alone (instances.rules.CHECK_ONLY): refused to anyone else, break-glass included.
CHECK_ONLY = {("failed", "running"), ("failed", "degraded")}


def test_instance_is_created_with_effective_runtime_topology_and_members(world):
    inst = world.call("project_admin", "GET", f"/v1/instances/{world.ids['instance_a1']}", 200).json()
    assert inst["operating_mode"] == "tenant_dedicated" and inst["control_plane_scope"] == "project"
    assert inst["runtime_backend"] == "slurm" and inst["tenant_boundary_mode"] == "tenant_isolated"
    assert inst["bound_capacity_shape"] == "baremetal"
    assert inst["artifact_reference"].startswith("registry.example.com/gpuaas/slurm:1.0.0@sha256:")
    members = world.call("project_member", "GET", f"/v1/instances/{inst['id']}/members", 200).json()["items"]
    # The platform spreads roles round robin over the allocation's hosts.
    assert [(m["role"], m["host_name"], m["status"]) for m in members] == [
        ("controller", "alloc-a1-h0", "pending"), ("worker", "alloc-a1-h1", "pending"),
        ("worker", "alloc-a1-h2", "pending")]
    assert members[0]["host"] == {"name": "alloc-a1-h0", "address": "10.77.0.10", "ssh_user": "root", "ssh_port": 22}
    assert all(m["allocation_id"] == world.ids["alloc_a1"] for m in members)
    one = world.call("service_account", "GET", f"/v1/instances/{inst['id']}/members/{members[1]['id']}", 200).json()
    assert one["node_name"] == "alloc-a1-h1"
    events = world.call("project_member", "GET", f"/v1/instances/{inst['id']}/events", 200).json()["items"]
    assert [e["type"] for e in events] == ["apps.instance.requested"]
    ev = events[0]
    assert ev["project_id"] == world.ids["project_a1"] and ev["tenant_id"] == world.ids["tenant_a"]
    assert (ev["app_slug"], ev["operating_mode"], ev["control_plane_scope"], ev["runtime_backend"]) == (
        "slurm", "tenant_dedicated", "project", "slurm")
    assert ev["payload"]["topology"]["roles"] == [{"name": "controller", "desired_count": 1},
                                                  {"name": "worker", "desired_count": 2}]


def test_operating_modes_mean_what_exists(world):
    """platform_managed does not exist yet and is refused, never quietly turned into something else; a tenant-shared
    runtime is a tenant admin's request, for an app that keeps per-project accounts and jobs."""
    world.ids["alloc_hints"] = register_allocation(world, "project_a1", "alloc-hints", hosts=5)["id"]
    url = f"/v1/projects/{world.ids['project_a1']}/instances"
    body = {"name": "managed", "app_slug": "slurm", "allocation_ids": [world.ids["alloc_hints"]]}
    for hint in ({"operating_mode": "platform_managed"}, {"control_plane_scope": "platform"}):
        error = world.call("project_admin", "POST", url, 422, json=body | hint).json()["error"]
        assert error["code"] == "mode_not_available" and "does not exist yet" in error["message"]
    error = world.call("project_admin", "POST", url, 403, json=body | {"control_plane_scope": "tenant"}).json()["error"]
    assert error["details"]["permission"] == "apps.shared_runtime.manage"
    shared = world.call("tenant_admin", "POST", url, 201, json=body | {"control_plane_scope": "tenant"}).json()
    assert (shared["control_plane_scope"], shared["environment"]) == ("tenant", "default")
    owner = world.call("tenant_admin", "GET", f"/v1/instances/{shared['id']}/attachments", 200).json()["items"]
    assert [(a["project_id"], a["owner"]) for a in owner] == [(world.ids["project_a1"], True)]
    error = world.call("tenant_admin", "POST", url, 409, json=body | {"control_plane_scope": "tenant", "name": "again"}
                       ).json()["error"]
    assert error["code"] == "shared_runtime_exists" and error["details"]["instance_id"] == shared["id"]
    world.call("tenant_admin", "DELETE", f"/v1/instances/{shared['id']}", 204)
    no_accounts = {k: v for k, v in SLURM_ADAPTER.items() if k not in ("access", "scheduler")}
    publish_app(world, "plain", adapter=no_accounts)
    world.call("platform_admin", "POST", f"/v1/projects/{world.ids['project_a1']}/entitlements", 201,
               json={"app_slug": "plain"})
    error = world.call("tenant_admin", "POST", url, 422, json=body | {"app_slug": "plain", "control_plane_scope":
                                                                      "tenant"}).json()["error"]
    assert error["code"] == "scope_not_supported"
    publish_app(world, "managed-only", runtime_backend="oci", operating_modes=["platform_managed"])
    world.call("platform_admin", "POST", f"/v1/projects/{world.ids['project_a1']}/entitlements", 201,
               json={"app_slug": "managed-only"})
    error = world.call("project_admin", "POST", url, 422, json=body | {"app_slug": "managed-only"}).json()["error"]
    assert error["code"] == "mode_not_available" and error["details"]["offered"] == ["platform_managed"]
    r = world.call("project_admin", "POST", url, 201, json=body | {"operating_mode": "tenant_dedicated"}).json()
    assert (r["operating_mode"], r["control_plane_scope"], r["tenant_boundary_mode"]) == (
        "tenant_dedicated", "project", "tenant_isolated")


def refusal(world, body, project="project_a1", actor="project_admin"):
    r = world.call(actor, "POST", f"/v1/projects/{world.ids[project]}/instances", 422, json=body)
    assert r.json()["error"]["code"] == "compatibility_refused"
    return {x["check"]: x["message"] for x in r.json()["error"]["details"]["reasons"]}


def test_compatibility_gate_says_exactly_why(world):
    publish_app(world, "slurm", "2.0.0", compat={"requires_capacity_shape": ["baremetal"], "min_gpu_count": 4,
                                                 "requires_exclusive_node": True, "multi_node": False})
    register_allocation(world, "project_a1", "slice", shape="gpu_slice", gpus=1, hosts=2)
    slice_id = world.call("project_admin", "GET", f"/v1/projects/{world.ids['project_a1']}/allocations",
                          200).json()["items"][-1]["id"]
    reasons = refusal(world, {"name": "x", "app_slug": "slurm", "version": "2.0.0", "allocation_ids": [slice_id],
                              "topology": [{"role": "worker", "count": 1}]})
    assert reasons["compatibility.capacity_shape"] == ("allocation slice is gpu_slice; the app requires one of "
                                                       "['baremetal']")
    assert reasons["compatibility.gpu_count"] == ("allocation slice has 1 GPU(s); the app needs at least 4 "
                                                  "per allocation")
    assert reasons["compatibility.exclusive_node"].endswith("the app requires an exclusive node")
    assert "single-node (multi_node=false)" in reasons["compatibility.multi_node"]
    assert "gpu_slice networking does not span nodes" in reasons["compatibility.multi_node_gpu_slice"]


def test_topology_bounds_and_placement_are_checked(world):
    free = register_allocation(world, "project_a1", "alloc-free")["id"]
    base = {"name": "x", "app_slug": "slurm", "allocation_ids": [free]}
    reasons = refusal(world, base | {"topology": [{"role": "controller", "count": 2}, {"role": "gpu", "count": 1}]})
    assert reasons["topology.count"] == "role controller count 2 is outside the adapter bounds 1..1"
    assert reasons["topology.role"] == "role 'gpu' is not defined by the app adapter"
    reasons = refusal(world, base | {"topology": [{"role": "worker", "count": 5}]})
    assert reasons["placement.capacity"] == ("role worker needs 5 hosts; the chosen allocations have 3 free "
                                             "(not used by another instance)")
    reasons = refusal(world, base | {"allocation_ids": [world.ids["alloc_a2"]]})
    assert reasons["allocation.unknown"].endswith("is not held by this project")
    placed = world.call("project_admin", "POST", f"/v1/projects/{world.ids['project_a1']}/instances", 201,
                        json=base | {"topology": [{"role": "controller", "count": 1, "placement": [
                            {"allocation_id": free, "host_name": "alloc-free-h2"}]}]}).json()
    members = world.call("project_admin", "GET", f"/v1/instances/{placed['id']}/members", 200).json()["items"]
    assert ("controller", "alloc-free-h2") in [(m["role"], m["host_name"]) for m in members]


def test_instance_state_machine_allows_exactly_the_legal_edges(world, database):
    # a host serves one instance: two hosts for each of the 36 instances
    world.ids["alloc_sm"] = register_allocation(world, "project_a1", "alloc-sm", hosts=2 * len(STATUSES) ** 2)["id"]
    for n, (start, target) in enumerate(itertools.product(STATUSES, STATUSES)):
        iid = UUID(create_instance(world, "service_account", "project_a1", f"sm-{n}", "alloc_sm", workers=1)["id"])
        with database.transaction() as conn:
            for step in PATH[start]:
                service.transition_instance(conn, iid, step, reason="setup")
        with database.transaction() as conn:
            if (start, target) in LEGAL:
                row = service.transition_instance(conn, iid, target, reason="test", correlation_id="cid-1")
                assert row["status"] == target
            else:
                with pytest.raises(ApiError) as exc:
                    service.transition_instance(conn, iid, target, reason="test")
                assert exc.value.code == "illegal_transition", (start, target)
        if (start, target) in CHECK_ONLY:
            with database.transaction() as conn:
                row = service.transition_instance(conn, iid, target, reason="health check", by_check=True)
            assert row["status"] == target
            continue
        events = world.call("project_admin", "GET", f"/v1/instances/{iid}/events", 200).json()["items"]
        expected = ["apps.instance.requested"] + [f"apps.instance.{s}" for s in PATH[start]]
        if (start, target) in LEGAL:
            expected.append(f"apps.instance.{target}")
            assert events[-1]["correlation_id"] == "cid-1" and events[-1]["payload"]["from"] == start
        assert [e["type"] for e in events] == expected, (start, target)


def test_member_lifecycle_from_a_worker_process(world, database):
    iid = UUID(world.ids["instance_a1"])
    with database.transaction() as conn:
        members, _ = service.list_members(conn, iid)
        worker = next(m for m in members if m["role"] == "worker")
        for step in ("joining", "active", "draining", "drained", "active", "removing", "removed"):
            service.set_member_status(conn, worker["id"], step, reason=step, actor=SYSTEM, correlation_id="op-7")
        with pytest.raises(ApiError) as exc:
            service.set_member_status(conn, worker["id"], "active")
        assert exc.value.code == "illegal_transition"
    events = world.call("project_admin", "GET", f"/v1/instances/{iid}/events", 200,
                        params={"member_id": str(worker["id"])}).json()["items"]
    assert [e["type"] for e in events] == ["member_joining", "member_added", "member_draining", "member_drained",
                                           "member_resumed", "member_removing", "member_removed"]
    assert {e["correlation_id"] for e in events} == {"op-7"}
    got = world.call("project_admin", "GET", f"/v1/instances/{iid}/members/{worker['id']}", 200).json()
    assert got["status"] == "removed" and got["last_correlation_id"] == "op-7"
    inst = world.call("project_admin", "GET", f"/v1/instances/{iid}", 200).json()
    assert {r["name"]: r["member_count"] for r in inst["topology"]["roles"]} == {"controller": 1, "worker": 1}


def test_member_transition_table_is_closed():
    for status, targets in MEMBER_TRANSITIONS.items():
        assert targets <= set(MEMBER_TRANSITIONS), status
    assert MEMBER_TRANSITIONS["removed"] == frozenset()


def test_add_member_respects_adapter_max_and_hosts(world, database):
    iid = UUID(world.ids["instance_a1"])
    alloc = UUID(world.ids["alloc_a1"])
    actor = SYSTEM
    with database.transaction() as conn:
        m = service.add_member(conn, actor, iid, "worker", alloc)
        assert m["host_name"] == "alloc-a1-h0" and m["status"] == "pending"
        with pytest.raises(ApiError) as exc:
            service.add_member(conn, actor, iid, "worker", alloc)
        assert exc.value.code == "no_free_host"
        with pytest.raises(ApiError) as exc:
            service.add_member(conn, actor, iid, "controller", alloc)
        assert exc.value.code == "role_at_max"
        with pytest.raises(ApiError) as exc:
            service.add_member(conn, actor, iid, "worker", UUID(world.ids["alloc_a2"]))
        assert exc.value.code == "allocation.unknown"
    inst = world.call("project_admin", "GET", f"/v1/instances/{iid}", 200).json()
    assert {r["name"]: (r["desired_count"], r["member_count"]) for r in inst["topology"]["roles"]} == {
        "controller": (1, 1), "worker": (3, 3)}


def test_exclusive_roles_keep_their_hosts_to_themselves(world, database):
    adapter = {**SLURM_ADAPTER, "roles": [{**r, "exclusive": r["name"] == "controller"}
                                          for r in SLURM_ADAPTER["roles"]]}
    publish_app(world, "dedicated", adapter=adapter)
    world.call("platform_admin", "POST", f"/v1/projects/{world.ids['project_a1']}/entitlements", 201,
               json={"app_slug": "dedicated"})
    alloc = register_allocation(world, "project_a1", "alloc-excl")["id"]
    base = {"app_slug": "dedicated", "allocation_ids": [alloc]}

    # Three hosts cannot hold a controller of its own and three workers.
    reasons = refusal(world, base | {"name": "x", "topology": [{"role": "worker", "count": 3}]})
    assert reasons == {"placement.exclusive": "role worker needs 3 hosts; the chosen allocations have too few "
                                              "free hosts to keep ['controller'] on hosts of their own"}
    # Nor may an explicit placement put a worker on the controller's host.
    on = [{"allocation_id": alloc, "host_name": h} for h in ("alloc-excl-h0", "alloc-excl-h1")]
    reasons = refusal(world, base | {"name": "x", "topology": [{"role": "controller", "count": 1, "placement": on[:1]},
                                                               {"role": "worker", "count": 2, "placement": on}]})
    assert reasons == {"placement.exclusive": "host alloc-excl-h0 would carry controller, worker; role controller "
                                              "must have its hosts to itself"}

    inst = world.call("project_admin", "POST", f"/v1/projects/{world.ids['project_a1']}/instances", 201,
                      json=base | {"name": "excl", "topology": [{"role": "worker", "count": 2}]}).json()
    members = world.call("project_admin", "GET", f"/v1/instances/{inst['id']}/members", 200).json()["items"]
    assert sorted((m["role"], m["host_name"]) for m in members) == [
        ("controller", "alloc-excl-h0"), ("worker", "alloc-excl-h1"), ("worker", "alloc-excl-h2")]
    with database.transaction() as conn:
        # The only host without a worker is the controller's: no automatic choice, and no explicit one.
        with pytest.raises(ApiError) as exc:
            service.add_member(conn, SYSTEM, UUID(inst["id"]), "worker", UUID(alloc))
        assert exc.value.code == "no_free_host"
        with pytest.raises(ApiError) as exc:
            service.add_member(conn, SYSTEM, UUID(inst["id"]), "worker", UUID(alloc), "alloc-excl-h0")
        assert exc.value.code == "compatibility_refused"
        assert [r["check"] for r in exc.value.details["reasons"]] == ["placement.exclusive"]


def test_delete_needs_nothing_running(world, database):
    iid = world.ids["instance_a1"]
    with database.transaction() as conn:
        service.transition_instance(conn, UUID(iid), "starting", reason="deploy")
    r = world.call("project_admin", "DELETE", f"/v1/instances/{iid}", 409)
    assert r.json()["error"]["code"] == "instance_not_deletable"
    world.call("platform_admin", "DELETE", f"/v1/allocations/{world.ids['alloc_a1']}", 409)
    r = world.call("platform_admin", "POST", f"/v1/admin/instances/{iid}/transitions", 200,
                   json={"to": "failed", "reason": "stuck in starting"},
                   headers={"X-Break-Glass-Reason": "INC-42 stuck deploy"}).json()
    assert r["status"] == "failed"
    bg = world.call("platform_admin", "GET", "/v1/audit", 200, params={"break_glass": "true"}).json()["items"]
    assert bg[0]["action"] == "apps.instance.transition" and "INC-42" in bg[0]["reason"]
    assert bg[0]["app_instance_id"] == iid and bg[0]["runtime_backend"] == "slurm"
    world.call("platform_admin", "POST", f"/v1/admin/instances/{iid}/transitions", 422,
               json={"to": "running", "reason": "nope"}, headers={"X-Break-Glass-Reason": "INC-42 stuck deploy"})
    world.ids["alloc_gone"] = register_allocation(world, "project_a1", "alloc-gone")["id"]
    fresh = create_instance(world, "project_admin", "project_a1", "gone", "alloc_gone")
    world.call("project_admin", "DELETE", f"/v1/instances/{fresh['id']}", 204)
    world.call("project_admin", "GET", f"/v1/instances/{fresh['id']}", 404)
    events = world.call("project_admin", "GET", f"/v1/instances/{fresh['id']}/events", 200).json()["items"]
    assert events[-1]["type"] == "apps.instance.deleted"
    assert world.call("project_admin", "POST", f"/v1/projects/{world.ids['project_a1']}/instances", 201, json={
        "name": "gone", "app_slug": "slurm", "allocation_ids": [world.ids["alloc_gone"]]})


def test_break_glass_needs_a_reason_and_is_audited(world):
    world.call("platform_admin", "GET", "/v1/admin/instances", 422)
    items = world.call("platform_admin", "GET", "/v1/admin/instances", 200,
                       headers={"X-Break-Glass-Reason": "quarterly access review"}).json()["items"]
    assert {i["project_id"] for i in items} == {world.ids["project_a1"], world.ids["project_a2"]}
    world.call("platform_admin", "GET", f"/v1/instances/{world.ids['instance_a1']}", 403)
    audit = world.call("platform_admin", "GET", "/v1/audit", 200, params={"action": "admin.instances.list"}).json()
    assert audit["items"][0]["break_glass"] is True and audit["items"][0]["reason"] == "quarterly access review"


def test_instance_list_filters_and_keyset_pagination(world, database):
    world.ids["alloc_page"] = register_allocation(world, "project_a1", "alloc-page", hosts=8)["id"]
    for i in range(4):
        create_instance(world, "service_account", "project_a1", f"page-{i}", "alloc_page", workers=1)
    with database.transaction() as conn:
        service.transition_instance(conn, UUID(world.ids["instance_a1"]), "starting", reason="x")
    pid = world.ids["project_a1"]
    names, cursor = [], None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = world.call("project_member", "GET", f"/v1/projects/{pid}/instances", 200, params=params).json()
        names += [i["name"] for i in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert names == ["page-3", "page-2", "page-1", "page-0", "slurm-a1"]
    starting = world.call("project_member", "GET", f"/v1/projects/{pid}/instances", 200,
                          params={"status": "starting"}).json()["items"]
    assert [i["name"] for i in starting] == ["slurm-a1"]
    updated = world.call("service_account", "PATCH", f"/v1/instances/{world.ids['instance_a1']}", 200,
                         json={"labels": {"env": "prod"}}).json()
    assert updated["labels"]["env"] == "prod"  # a merge: labels set elsewhere stay

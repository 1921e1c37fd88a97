"""Finding 7: the queue was one global FIFO (a burst of 15 refreshes from one tenant delayed another
tenant's deploy by 21 s) and no project had a quota. Now a claim serves the tenant with the fewest
running operations, then the one served longest ago, so another tenant's operation starts after at
most one pickup of the burst; per-instance order still holds. Open operations (and instances) per
project have quotas, refused with 429 `quota_exceeded` naming the limit.

The claims here are the real queue's, made the way a worker makes them (bench/bench_fairness.py
measures the delay with real workers and runs)."""

from __future__ import annotations

import dataclasses

from gpuaas_api.operations import service
from operations.helpers import TEST_APP

SA, OTHER = "service_account", "other_tenant_admin"


def instance(ops, tenant: str, name: str) -> dict:
    """An instance of tenant "a" (project a1, the service account) or "b" (project b1, its tenant
    admin), on an allocation of hosts of its own."""
    w = ops.w
    project, actor, net = {"a": ("project_a1", SA, 1), "b": ("project_b1", OTHER, 2)}[tenant]
    key = f"alloc_fair_{tenant}"
    if key not in w.ids:
        if tenant == "b":
            w.call("platform_admin", "POST", f"/v1/projects/{w.ids[project]}/entitlements", 201,
                   json={"app_slug": TEST_APP})
        w.ids[key] = w.call("platform_admin", "POST", "/v1/allocations", 201, json={
            "project_id": w.ids[project], "name": key.replace("_", "-"), "capacity_shape": "baremetal",
            "gpu_count": 8, "region": "eu-west-1", "sku": "h100-8x",
            "hosts": [{"name": f"fair-{tenant}-h{i}", "address": f"10.91.{net}.{i + 10}", "ssh_user": "root"}
                      for i in range(16)]}).json()["id"]
    marker = ops.marker_root / name
    marker.mkdir()
    return w.call(actor, "POST", f"/v1/projects/{w.ids[project]}/instances", 201, json={
        "name": name, "app_slug": TEST_APP, "allocation_ids": [w.ids[key]],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
        "parameters": {"marker_dir": str(marker)}}).json()


def deploy(ops, actor: str, instance: dict) -> str:
    return ops.w.call(actor, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()["id"]


def claim(ops, slot: str) -> str | None:
    with ops.database.transaction() as conn:
        op = service.claim(conn, slot, 30, "test-machine")
    return op and str(op["id"])


def finish(ops, op_id: str, slot: str) -> None:
    with ops.database.transaction() as conn:
        assert service.finish(conn, op_id, slot, "succeeded")


def test_another_tenant_is_served_after_at_most_one_pickup_of_a_burst(ops):
    burst = [deploy(ops, SA, instance(ops, "a", f"burst{i}")) for i in range(6)]
    b1 = instance(ops, "b", "b1")
    b_deploy = deploy(ops, OTHER, b1)
    b_reconf = ops.w.call(OTHER, "POST", f"/v1/instances/{b1['id']}/reconfigure", 202,
                          json={"parameters": {}}).json()["id"]
    # Several workers: the first takes the burst's head, the second tenant B's deploy, which
    # arrived after the whole burst.
    assert claim(ops, "w1/0") == burst[0]
    assert claim(ops, "w2/0") == b_deploy
    assert claim(ops, "w3/0") == burst[1]
    # Tenant B runs fewer, but its next operation waits behind its instance's running deploy.
    assert claim(ops, "w4/0") == burst[2]
    for op, slot in ((burst[0], "w1/0"), (b_deploy, "w2/0"), (burst[1], "w3/0"), (burst[2], "w4/0")):
        finish(ops, op, slot)
    # Nothing running: the tenant served longest ago goes first.
    assert claim(ops, "w1/0") == b_reconf
    finish(ops, b_reconf, "w1/0")
    # One worker: tenant B queues while A's operation runs, and goes next.
    assert claim(ops, "w1/0") == burst[3]
    b_again = deploy(ops, OTHER, instance(ops, "b", "b2"))
    finish(ops, burst[3], "w1/0")
    assert claim(ops, "w1/0") == b_again
    # With tenant B idle, the burst drains in its own order.
    finish(ops, b_again, "w1/0")
    assert [claim(ops, "w1/0") for _ in range(2)] == burst[4:]


def test_open_operations_per_project_have_a_quota(ops, app):
    app.state.operation_settings = dataclasses.replace(ops.settings, max_open_operations_per_project=2)
    instances = [instance(ops, "a", f"quota{i}") for i in range(3)]
    first, _ = (deploy(ops, SA, i) for i in instances[:2])
    refused = ops.w.call(SA, "POST", f"/v1/instances/{instances[2]['id']}/deploy", 429).json()["error"]
    assert refused["code"] == "quota_exceeded" and refused["correlation_id"]
    assert refused["details"] == {"quota": "open_operations", "limit": 2, "current": 2}
    # another tenant's project has its own quota
    deploy(ops, OTHER, instance(ops, "b", "b-quota"))
    ops.w.call(SA, "POST", f"/v1/operations/{first}/cancel", 202)
    deploy(ops, SA, instances[2])


def test_instances_per_project_have_a_quota(ops, app):
    instance(ops, "a", "inst0")
    held = ops.sql("SELECT count(*) AS n FROM app_instances WHERE project_id = %s AND deleted_at IS NULL",
                   (ops.ids["project_a1"],))[0]["n"]
    app.state.settings = dataclasses.replace(app.state.settings, max_instances_per_project=held)
    body = {"name": "one-too-many", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_fair_a"]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
            "parameters": {"marker_dir": str(ops.marker_root)}}
    url = f"/v1/projects/{ops.ids['project_a1']}/instances"
    refused = ops.w.call(SA, "POST", url, 429, json=body).json()["error"]
    assert refused["code"] == "quota_exceeded" and refused["details"]["quota"] == "instances"
    assert refused["details"]["limit"] == held
    app.state.settings = dataclasses.replace(app.state.settings, max_instances_per_project=held + 1)
    ops.w.call(SA, "POST", url, 201, json=body)

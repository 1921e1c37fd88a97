"""Finding 4: nothing kept hosts apart. Two allocations with a host named `n1` collapsed into one
inventory host; an address could be registered by two tenants; default placement stacked every
instance on the same hosts. Now node names are unique within an instance, an address (with its
port) belongs to one tenant, and a host carries the live members of at most one instance unless
the app version declares `shares_hosts`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from api.world import DIGEST
from operations.helpers import TEST_APP, make_instance, members

SA, PA = "service_account", "platform_admin"


def allocation(ops, project: str, name: str, hosts: list[tuple[str, str, int]], expect: int = 201):
    r = ops.w.call(PA, "POST", "/v1/allocations", expect, json={
        "project_id": ops.ids[project], "name": name, "capacity_shape": "baremetal", "gpu_count": 8,
        "region": "eu-west-1", "hosts": [{"name": n, "address": a, "ssh_port": p} for n, a, p in hosts]})
    return r.json()


def create(ops, name: str, expect: int, allocation_ids: list[str], topology: list[dict], **extra):
    body = {"name": name, "app_slug": TEST_APP, "allocation_ids": allocation_ids, "topology": topology,
            "parameters": {"marker_dir": str(ops.marker_root)}} | extra
    return ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", expect, json=body).json()


def hosts_of(ops, instance_id: str) -> set[str]:
    return {m["host_name"] for m in members(ops, instance_id) if m["status"] != "removed"}


def test_repeated_host_names_get_distinct_node_names(ops):
    a = allocation(ops, "project_a1", "rack-a", [("n1", "10.99.0.1", 22), ("n2", "10.99.0.2", 22)])
    b = allocation(ops, "project_a1", "rack-b", [("n1", "10.99.1.1", 22), ("n2", "10.99.1.2", 22)])
    inst = create(ops, "twins", 201, [a["id"], b["id"]], [
        {"role": "controller", "count": 1, "placement": [{"allocation_id": a["id"], "host_name": "n1"}]},
        {"role": "worker", "count": 2, "placement": [{"allocation_id": a["id"], "host_name": "n1"},
                                                     {"allocation_id": b["id"], "host_name": "n1"}]}])
    nodes = {(m["allocation_id"], m["role"]): m["node_name"] for m in members(ops, inst["id"])}
    # one host, one node name (controller and worker share a-n1); b-n1 is another node
    assert nodes[(a["id"], "controller")] == nodes[(a["id"], "worker")] == "n1"
    assert nodes[(b["id"], "worker")] != "n1"
    ops.w.call(SA, "POST", f"/v1/instances/{inst['id']}/deploy", 202)  # member adds queue behind it
    new = ops.w.call(SA, "POST", f"/v1/instances/{inst['id']}/members", 202,
                     json={"role": "worker", "allocation_id": b["id"], "host_name": "n2"}).json()
    a_n2 = ops.w.call(SA, "POST", f"/v1/instances/{inst['id']}/members", 202,
                      json={"role": "worker", "allocation_id": a["id"], "host_name": "n2"}).json()
    names = {m["id"]: m["node_name"] for m in members(ops, inst["id"])}
    assert names[new["member_ids"][0]] == "n2"
    assert names[a_n2["member_ids"][0]] not in {"n1", "n2"}
    live = [m["node_name"] for m in members(ops, inst["id"])]
    assert len(set(live)) == len({(m["allocation_id"], m["host_name"]) for m in members(ops, inst["id"])})


def test_an_address_belongs_to_one_tenant(ops):
    allocation(ops, "project_a1", "mine", [("n1", "10.98.0.1", 22)])
    r = ops.w.call(PA, "POST", "/v1/allocations", 409, json={
        "project_id": ops.ids["project_b1"], "name": "theirs", "capacity_shape": "baremetal", "gpu_count": 8,
        "region": "eu-west-1", "hosts": [{"name": "x", "address": "10.98.0.1"}]})
    assert r.json()["error"]["code"] == "host_registered_elsewhere"
    assert "10.98.0.1:22" in r.json()["error"]["message"]
    # another port on that address is another host; the tenant's other project may register it too
    allocation(ops, "project_b1", "theirs", [("x", "10.98.0.1", 2222)])
    allocation(ops, "project_a2", "sibling", [("n1", "10.98.0.1", 22)])


def test_a_host_carries_one_instance(ops):
    one, _ = make_instance(ops, "one", workers=1)  # alloc_ops: 4 hosts, one uses 2
    two, _ = make_instance(ops, "two", workers=1)
    assert not hosts_of(ops, one["id"]) & hosts_of(ops, two["id"])
    r = ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 422, json={
        "name": "three", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops"]],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]})
    assert "placement.capacity" in {x["check"] for x in r.json()["error"]["details"]["reasons"]}

    taken = sorted(hosts_of(ops, one["id"]))[0]
    r = ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 409, json={
        "name": "squat", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops"]],
        "topology": [{"role": "controller", "count": 1, "placement": [
            {"allocation_id": ops.ids["alloc_ops"], "host_name": taken}]}, {"role": "worker", "count": 1}]})
    assert r.json()["error"]["code"] == "host_in_use" and taken in r.json()["error"]["message"]

    # member add and replace may not take another instance's host either
    ops.w.call(SA, "POST", f"/v1/instances/{two['id']}/deploy", 202)
    r = ops.w.call(SA, "POST", f"/v1/instances/{two['id']}/members", 409,
                   json={"role": "worker", "allocation_id": ops.ids["alloc_ops"], "host_name": taken})
    assert r.json()["error"]["code"] == "host_in_use"
    # by default a worker joins the instance's own controller host, then there is no host left
    ops.w.call(SA, "POST", f"/v1/instances/{two['id']}/members", 202,
               json={"role": "worker", "allocation_id": ops.ids["alloc_ops"]})
    r = ops.w.call(SA, "POST", f"/v1/instances/{two['id']}/members", 409,
                   json={"role": "worker", "allocation_id": ops.ids["alloc_ops"]})
    assert r.json()["error"]["code"] == "no_free_host"
    assert hosts_of(ops, two["id"]).isdisjoint(hosts_of(ops, one["id"]))

    # the binding is by address and port: the same machine under another allocation is taken too
    address = next(h for h in ops.w.call(PA, "GET", f"/v1/allocations/{ops.ids['alloc_ops']}", 200).json()["hosts"]
                   if h["name"] == taken)["address"]
    alias = allocation(ops, "project_a1", "alias", [("same-box", address, 22)])
    r = ops.w.call(SA, "POST", f"/v1/instances/{two['id']}/members", 409,
                   json={"role": "worker", "allocation_id": alias["id"], "host_name": "same-box"})
    assert r.json()["error"]["code"] == "host_in_use"

    # deleting the instance frees its hosts
    ops.w.call(SA, "DELETE", f"/v1/instances/{one['id']}", 204)
    create(ops, "three", 201, [ops.ids["alloc_ops"]], [{"role": "controller", "count": 1},
                                                        {"role": "worker", "count": 1}])


def test_concurrent_creates_never_share_a_host(ops):
    def fire(i):
        return ops.w.client.post(f"/v1/projects/{ops.ids['project_a1']}/instances", headers=ops.w.headers(SA), json={
            "name": f"race-{i}", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops"]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]}).status_code

    with ThreadPoolExecutor(6) as pool:
        codes = list(pool.map(fire, range(6)))
    assert sorted(codes) == [201, 201, 422, 422, 422, 422]
    shared = ops.sql("""SELECT m.host_name FROM app_instance_members m WHERE m.status <> 'removed'
                        GROUP BY m.allocation_id, m.host_name HAVING count(DISTINCT m.instance_id) > 1""")
    assert shared == []


def publish_variant(ops, version: str, *, registry: str = "registry.example.com", compat: dict | None = None,
                    roles: list[dict] | None = None) -> dict:
    """Another active version of the test app: 1.0.0's descriptor with a different registry,
    compatibility or roles."""
    base = ops.w.call(PA, "GET", f"/v1/catalog/apps/{TEST_APP}/versions/1.0.0", 200).json()
    if registry == "registry.example.com":  # the same build: runs of the variant execute it
        artifact = {"id": base["artifact_id"]}
    else:  # an artifact from another registry, for placement and policy checks (never run)
        artifact = ops.w.call(PA, "POST", f"/v1/catalog/apps/{TEST_APP}/artifacts", 201, json={
            "kind": "controller", "reference": f"{registry}/gpuaas/{TEST_APP}:{version}@{DIGEST}"}).json()
        for target in ("staged", "canary", "active"):
            ops.w.call(PA, "POST", f"/v1/catalog/artifacts/{artifact['id']}/transitions", 200,
                       json={"to": target, "reason": "tests"})
    ops.w.call(PA, "POST", f"/v1/catalog/apps/{TEST_APP}/versions", 201, json={
        "version": version, "artifact_id": artifact["id"], "compatibility": base["compatibility"] | (compat or {}),
        "runtime_profile": base["runtime_profile"], "adapter": base["adapter"] | ({"roles": roles} if roles else {})})
    return ops.w.call(PA, "POST", f"/v1/catalog/apps/{TEST_APP}/versions/{version}/transitions", 200,
                      json={"to": "active", "reason": "publish", "skip_gates": True}).json()


def test_an_app_version_may_declare_that_it_shares_hosts(ops):
    version = publish_variant(ops, "9.0.0", compat={"shares_hosts": True})
    assert version["compatibility"]["shares_hosts"] is True
    topology = [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]
    first = create(ops, "shared-1", 201, [ops.ids["alloc_ops2"]], topology, version="9.0.0")
    second = create(ops, "shared-2", 201, [ops.ids["alloc_ops2"]], topology, version="9.0.0")
    assert hosts_of(ops, first["id"]) == hosts_of(ops, second["id"])
    # a host that a sharing app uses is not free for an app that wants its hosts to itself
    exclusive = create(ops, "alone", 201, [ops.ids["alloc_ops2"]], topology, version="1.0.0")
    assert not hosts_of(ops, exclusive["id"]) & hosts_of(ops, first["id"])


def test_explicit_placement_outside_allocation_ids_is_a_422_naming_it(ops):
    """Finding 9, one line: this was a 500 (KeyError while checking the topology)."""
    r = ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 422, json={
        "name": "elsewhere", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops"]],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1, "placement": [
            {"allocation_id": ops.ids["alloc_ops2"], "host_name": "alloc-ops2-h0"}]}]})
    reason = next(x for x in r.json()["error"]["details"]["reasons"] if x["check"] == "placement.host")
    assert reason["allocation_id"] == ops.ids["alloc_ops2"] and ops.ids["alloc_ops2"] in reason["message"]

"""Finding 3: an Idempotency-Key was matched on caller and instance only, so the same key sent to
remove a second member returned the first member's operation and the second member stayed. Keys
are scoped to caller, route and target (instance, and member for member routes): inside that scope
a retry gets the same operation and another body is refused; outside it the key is a new request."""

from __future__ import annotations

from uuid import UUID

from gpuaas_api.iam.auth import SYSTEM
from gpuaas_api.instances import service as instances
from operations.helpers import make_instance, members

SA = "service_account"


def post(ops, path: str, key: str, **kw):
    return ops.w.client.post(path, headers=ops.w.headers(SA) | {"Idempotency-Key": key}, **kw)


def running(ops, name: str, workers: int = 2) -> dict:
    """An instance whose deploy has happened: running, every member active (no worker needed)."""
    instance, _ = make_instance(ops, name, workers=workers)
    with ops.database.transaction() as conn:
        instances.transition_instance(conn, UUID(instance["id"]), "starting", reason="test setup")
        instances.transition_instance(conn, UUID(instance["id"]), "running", reason="test setup")
        for m in members(ops, instance["id"]):
            for status in ("joining", "active"):
                instances.set_member_status(conn, UUID(m["id"]), status, actor=SYSTEM)
    return instance


def test_same_key_on_another_member_is_its_own_operation(ops):
    iid = running(ops, "idem-scope", workers=3)["id"]  # two removals keep the role's minimum
    worker_a, worker_b, _ = [m for m in members(ops, iid) if m["role"] == "worker"]

    first = post(ops, f"/v1/instances/{iid}/members/{worker_a['id']}/remove", "remove-1")
    assert first.status_code == 202, first.text
    second = post(ops, f"/v1/instances/{iid}/members/{worker_b['id']}/remove", "remove-1")
    assert second.status_code == 202, second.text
    assert second.json()["id"] != first.json()["id"]
    assert second.json()["member_ids"] == [worker_b["id"]]

    # a retry inside the scope is the same operation
    again = post(ops, f"/v1/instances/{iid}/members/{worker_a['id']}/remove", "remove-1")
    assert (again.status_code, again.json()["id"]) == (202, first.json()["id"])
    # another route with the same key is another request
    refresh = post(ops, f"/v1/instances/{iid}/refresh", "remove-1")
    assert refresh.status_code == 202 and refresh.json()["kind"] == "refresh"
    # the same route and target with another body is refused
    add = post(ops, f"/v1/instances/{iid}/members", "add-1",
               json={"role": "worker", "allocation_id": ops.ids["alloc_ops2"]})
    assert add.status_code == 202, add.text
    other = post(ops, f"/v1/instances/{iid}/members", "add-1",
                 json={"role": "worker", "allocation_id": ops.ids["alloc_ops"]})
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
    assert other.json()["error"]["details"]["operation_id"] == add.json()["id"]

    ops_by_kind = ops.sql("SELECT kind, member_ids FROM operations WHERE instance_id = %s ORDER BY seq", (iid,))
    assert [o["kind"] for o in ops_by_kind] == ["member_remove", "member_remove", "refresh", "member_add"]

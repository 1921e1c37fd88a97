"""Finding 2: deleting an instance whose deploy was still queued returned 204; the worker that
claimed the deploy then crashed, every restart crashed again, and after the last attempt every
worker exited within seconds of starting. Now an instance with an open operation cannot be deleted
(409 naming the operation), and a worker survives whatever one operation does: the failure is
recorded on that operation and the worker goes on with the next one, in the claim, run and lease
recovery paths alike."""

from __future__ import annotations

import threading

from operations.helpers import make_instance, wait_op

SA = "service_account"


def worker_alive(worker) -> bool:
    """Its claim loop still runs (a loop that raised would have ended its thread)."""
    loops = [t for t in threading.enumerate() if t.name.startswith("worker-") and t.is_alive()]
    return bool(loops) and not worker.stop.is_set()


def test_delete_with_a_queued_deploy_is_refused_until_it_is_canceled(ops):
    instance, _ = make_instance(ops, "del-queued")
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    refused = ops.w.call(SA, "DELETE", f"/v1/instances/{instance['id']}", 409).json()["error"]
    assert refused["code"] == "operation_open"
    assert refused["details"]["operation_id"] == op["id"] and refused["details"]["status"] == "queued"
    assert refused["correlation_id"]
    ops.w.call(SA, "POST", f"/v1/operations/{op['id']}/cancel", 202)
    ops.w.call(SA, "DELETE", f"/v1/instances/{instance['id']}", 204)


def test_worker_survives_an_operation_whose_instance_was_deleted(ops):
    """The state the old API allowed (a queued deploy on a deleted instance), made by hand, in both
    places a worker meets it: the claim and run, and lease recovery after the last attempt."""
    doomed, _ = make_instance(ops, "doomed", workers=1)
    expired, _ = make_instance(ops, "expired", workers=1)
    healthy, _ = make_instance(ops, "healthy", workers=1, allocation="alloc_ops2")
    doomed_op = ops.w.call(SA, "POST", f"/v1/instances/{doomed['id']}/deploy", 202).json()
    expired_op = ops.w.call(SA, "POST", f"/v1/instances/{expired['id']}/deploy", 202).json()
    with ops.database.transaction() as conn:
        conn.execute("""UPDATE operations SET status = 'running', attempt = max_attempts, lease_owner = 'ghost/0',
                               lease_expires_at = now() - interval '1 s' WHERE id = %s""", (expired_op["id"],))
        for iid in (doomed["id"], expired["id"]):
            conn.execute("UPDATE app_instance_members SET status = 'removed' WHERE instance_id = %s", (iid,))
            conn.execute("UPDATE app_instances SET deleted_at = now() WHERE id = %s", (iid,))
    worker = ops.start_worker()
    for op in (doomed_op, expired_op):
        row = wait_op(ops, op["id"], timeout=30)
        assert row["status"] == "failed" and row["error"]["code"], row
    healthy_op = ops.w.call(SA, "POST", f"/v1/instances/{healthy['id']}/deploy", 202).json()
    assert wait_op(ops, healthy_op["id"], timeout=60)["status"] == "succeeded"
    assert worker_alive(worker)

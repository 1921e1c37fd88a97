"""A degraded instance as the health check leaves it, for the CLI and console tests of the day-2 read
models (issue 23). No check runs in these tests (no test host, no status module): what a check writes is
seeded in the database, as health/service.py writes it (the instance's health record, each member's
runtime, the timeline's health and cleanup events). The operations are real ones accepted through the
API; no worker runs them, so the deploy's success is seeded too."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from gpuaas_api.audit import service as audit
from gpuaas_api.instances import service as instances
from psycopg.types.json import Jsonb

SA = "service_account"
CHECKED_AT = "2025-05-01T10:00:00+00:00"
CHECK = {"module": "opsapp_status", "hosts": 3, "members": 3, "seconds": 0.84}


@dataclass
class Degraded:
    instance: dict
    controller: dict  # its member, active: the check read it, with the app's details
    worker: dict  # its member, failed: its host did not answer
    deploy: dict  # the instance's deploy: the controller's last operation
    remove: dict  # the worker's removal, queued: the worker's last operation
    unreachable: str  # the check's reason for the worker
    failed_message: str  # the instance's status reason, less the check's prefix


def seed_degraded(ops, instance: dict) -> Degraded:
    """`instance`: a created one with one controller and two workers (make_instance(workers=2)); the first
    worker is the failed one, the other stays active (so that the failed one may be removed: a role keeps
    its minimum)."""
    w = ops.w
    deploy = w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    listed = w.call(SA, "GET", f"/v1/instances/{instance['id']}/members", 200).json()["items"]
    controller = next(m for m in listed if m["role"] == "controller")
    worker, other = sorted((m for m in listed if m["role"] == "worker"), key=lambda m: m["node_name"])
    unreachable = f"host {worker['node_name']} unreachable: ssh: connect to host port 22: Connection timed out"
    failed_message = f"1 member(s) failed: {worker['node_name']}: {unreachable}"
    health = {"checked_at": CHECKED_AT, "check": CHECK, "control_plane_read": True, "conditions": [
        {"type": "ControlPlaneAvailable", "status": "True", "reason": "Answered", "message": "",
         "last_transition_at": "2025-05-01T09:00:00+00:00"},
        {"type": "MembersHealthy", "status": "False", "reason": "MembersFailed",
         "message": f"{worker['node_name']}: {unreachable}", "last_transition_at": "2025-05-01T09:59:40+00:00"},
        {"type": "Healthy", "status": "False", "reason": "Unhealthy", "message": failed_message,
         "last_transition_at": "2025-05-01T09:59:40+00:00"}]}
    controller_runtime = {"checked_at": CHECKED_AT, "reachable": True, "observed": "active", "reason": "",
                          "details": {"node_state": "IDLE", "reason": "site maintenance", "running_jobs": 0,
                                      "probe_ok": True, "image": None, "digest": ""}}
    worker_runtime = {"checked_at": CHECKED_AT, "reachable": False, "observed": "failed", "reason": unreachable,
                      "details": {}}
    with ops.database.transaction() as conn:
        conn.execute("UPDATE operations SET status = 'succeeded', started_at = now(), finished_at = now() "
                     "WHERE id = %s", (deploy["id"],))
        conn.execute("UPDATE app_instances SET status = 'degraded', status_reason = %s, health = %s WHERE id = %s",
                     ("health check: " + failed_message, Jsonb(health), instance["id"]))
        for member, status, reason, runtime in (
                (controller, "active", "", controller_runtime),
                (worker, "failed", "health check: " + unreachable, worker_runtime),
                (other, "active", "", controller_runtime)):
            conn.execute("UPDATE app_instance_members SET status = %s, status_reason = %s, runtime = %s WHERE id = %s",
                         (status, reason, Jsonb(runtime), member["id"]))
        row = instances.get_instance(conn, UUID(instance["id"]))
        cid = "health-" + instance["id"]
        audit.append_event(conn, row, "healthy", CHECK | {"failed_members": [], "control_plane": True, "reason": ""},
                           correlation_id=cid)
        audit.append_event(conn, row, "member_failed", {
            "member_id": worker["id"], "role": "worker", "node_name": worker["node_name"], "from": "active",
            "to": "failed", "reason": "health check: " + unreachable}, member_id=UUID(worker["id"]), correlation_id=cid)
        audit.append_event(conn, row, "unhealthy", CHECK | {
            "failed_members": [f"{worker['node_name']}: {unreachable}"], "control_plane": True,
            "reason": failed_message}, correlation_id=cid)
    remove = w.call(SA, "POST", f"/v1/instances/{instance['id']}/members/{worker['id']}/remove", 202).json()
    with ops.database.transaction() as conn:
        audit.append_event(conn, row, "host_cleanup_pending", {
            "member_id": worker["id"], "node_name": worker["node_name"], "operation_id": remove["id"]},
            member_id=UUID(worker["id"]), correlation_id=remove["correlation_id"])
        audit.append_event(conn, row, "host_cleaned", {
            "member_id": worker["id"], "node_name": worker["node_name"], "host_name": worker["host_name"],
            "attempts": 2}, member_id=UUID(worker["id"]), correlation_id=remove["correlation_id"])
        audit.append_event(conn, row, "member_recovered", {
            "member_id": controller["id"], "role": "controller", "node_name": controller["node_name"],
            "from": "failed", "to": "active", "reason": "health check: read active"},
            member_id=UUID(controller["id"]), correlation_id=cid)
    return Degraded(instance, controller, worker, deploy, remove, unreachable, failed_message)

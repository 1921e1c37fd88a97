"""Instance and member status follow what a run proved. One function per phase of an operation:
before the run (what is about to happen), after success, after failure (including timeout, cancel
while running and a lost worker), and after a cancel before the run. Moves take the legal path
through the status machines, so every step appears on the timeline."""

from __future__ import annotations

import logging
from collections import deque
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from ..audit import service as audit
from ..instances import rules as irules
from ..instances import service as instances

log = logging.getLogger(__name__)
LIVE = ("joining", "active", "draining", "drained", "removing")


def _path(table: dict[str, frozenset[str]], start: str, goal: str) -> list[str] | None:
    """Shortest legal path of statuses from start to goal (excluding start); None if unreachable.
    `failed` is never a stop on the way: it would claim something the run did not show."""
    seen, queue = {start}, deque([(start, [])])
    while queue:
        state, path = queue.popleft()
        if state == goal:
            return path
        for nxt in sorted(table[state]):
            if nxt not in seen and (nxt != "failed" or nxt == goal):
                seen.add(nxt)
                queue.append((nxt, path + [nxt]))
    return None


def move_member(conn: psycopg.Connection, member_id: UUID, goal: str, reason: str, cid: str) -> None:
    current = conn.execute("SELECT status FROM app_instance_members WHERE id = %s", (member_id,)).fetchone()
    path = _path(irules.MEMBER_TRANSITIONS, current["status"], goal) if current else None
    if path is None:
        log.warning("member %s: no legal path from %s to %s", member_id, current and current["status"], goal)
        return
    for step in path:
        instances.set_member_status(conn, member_id, step, reason=reason, correlation_id=cid)


def move_instance(conn: psycopg.Connection, instance_id: UUID, goal: str, reason: str, cid: str) -> None:
    current = instances.get_instance(conn, instance_id, include_deleted=True)
    path = _path(irules.INSTANCE_TRANSITIONS, current["status"], goal)
    if path is None:
        log.warning("instance %s: no legal path from %s to %s", instance_id, current["status"], goal)
        return
    for step in path:
        instances.transition_instance(conn, instance_id, step, reason=reason, correlation_id=cid)


def _members(conn, instance_id: UUID, statuses: tuple[str, ...]) -> list[dict]:
    return conn.execute("SELECT * FROM app_instance_members WHERE instance_id = %s AND status = ANY(%s) ORDER BY seq",
                        (instance_id, list(statuses))).fetchall()


def _new_member(op: dict) -> UUID:
    return op["member_ids"][-1]


def on_start(conn: psycopg.Connection, op: dict) -> None:
    """Idempotent: a re-attempt after a lost lease finds the statuses already moved."""
    kind, iid, cid = op["kind"], op["instance_id"], op["correlation_id"]
    why = f"{kind} running (operation {op['id']})"
    if kind == "deploy":
        move_instance(conn, iid, "starting", why, cid)
        for m in _members(conn, iid, ("pending", "failed")):
            move_member(conn, m["id"], "joining", why, cid)
    elif kind in ("member_add", "member_replace"):
        move_member(conn, _new_member(op), "joining", why, cid)
    elif kind == "member_drain":
        move_member(conn, op["member_ids"][0], "draining", why, cid)
    elif kind == "member_remove":
        move_member(conn, op["member_ids"][0], "removing", why, cid)
    elif kind == "decommission":
        instance = instances.get_instance(conn, iid, include_deleted=True)
        if instance["status"] != "stopping":
            move_instance(conn, iid, "stopping", why, cid)
            audit.append_event(conn, instance, "apps.instance.deleting", {"operation_id": str(op["id"])},
                               correlation_id=cid)


def on_success(conn: psycopg.Connection, op: dict, outcome: dict) -> None:
    kind, iid, cid = op["kind"], op["instance_id"], op["correlation_id"]
    why = f"{kind} succeeded (operation {op['id']})"
    instance = instances.get_instance(conn, iid, include_deleted=True)
    if kind == "deploy":
        joined = _members(conn, iid, ("joining",))
        for m in joined:
            move_member(conn, m["id"], "active", why, cid)
        audit.append_event(conn, instance, "start_completed", {"operation_id": str(op["id"]), "members": len(joined)},
                           correlation_id=cid)
        audit.append_event(conn, instance, "healthy", {"proof": "the deploy playbook ran a job on every worker"},
                           correlation_id=cid)
        move_instance(conn, iid, "running", why, cid)
    elif kind in ("member_add", "member_resume"):
        move_member(conn, op["member_ids"][-1], "active", why, cid)
    elif kind == "member_drain":
        move_member(conn, op["member_ids"][0], "drained", why, cid)
    elif kind == "member_remove":
        move_member(conn, op["member_ids"][0], "removed", why, cid)
    elif kind == "member_replace":
        move_member(conn, _new_member(op), "active", why, cid)
        move_member(conn, op["member_ids"][0], "drained", why, cid)
        move_member(conn, op["member_ids"][0], "removed", why, cid)
    elif kind == "reconfigure":
        parameters = instance["parameters"] | op["params"]["request"].get("parameters", {})
        conn.execute("UPDATE app_instances SET parameters = %s, updated_at = now() WHERE id = %s",
                     (Jsonb(parameters), iid))
        audit.append_event(conn, instance, "apps.instance.reconfigured", {"operation_id": str(op["id"])},
                           correlation_id=cid)
    elif kind in ("upgrade", "rollback"):
        target = UUID(op["params"]["target_version_id"])
        conn.execute("""UPDATE app_instances SET previous_version_id = app_version_id, app_version_id = %s,
                            updated_at = now() WHERE id = %s""", (target, iid))
        versions = conn.execute("SELECT id, version FROM app_versions WHERE id = ANY(%s)",
                                ([instance["app_version_id"], target],)).fetchall()
        names = {v["id"]: v["version"] for v in versions}
        event = "apps.instance.upgraded" if kind == "upgrade" else "apps.instance.rolled_back"
        audit.append_event(conn, instance, event,
                           {"from": names.get(instance["app_version_id"]), "to": names.get(target)}, correlation_id=cid)
    elif kind == "decommission":
        for m in _members(conn, iid, ("pending", "failed") + LIVE):
            move_member(conn, m["id"], "removed", why, cid)
        move_instance(conn, iid, "stopped", why, cid)
        audit.append_event(conn, instance, "apps.instance.deleted",
                           {"operation_id": str(op["id"]), "runtime": "torn down and verified by the playbook"},
                           correlation_id=cid)
    elif kind == "refresh":
        _apply_observed(conn, instance, outcome.get("observed", {}), why, cid)


def _apply_observed(conn, instance: dict, observed: dict[str, str | None], why: str, cid: str) -> None:
    """observed: member id -> status read from the runtime (None: unknown, left alone)."""
    changed = 0
    for m in _members(conn, instance["id"], LIVE + ("failed",)):
        goal = observed.get(str(m["id"]))
        if goal and goal != m["status"]:
            move_member(conn, m["id"], goal, why, cid)
            changed += 1
    audit.append_event(conn, instance, "refresh_completed", {"observed": len(observed), "changed": changed},
                       correlation_id=cid)


def on_failure(conn: psycopg.Connection, op: dict, reason: str) -> None:
    """What is known after a failed, timed-out, canceled-while-running or abandoned run: the members
    the run was changing are failed with the reason; deploy and decommission fail the instance.
    Other instance-level runs (reconfigure, upgrade, rollback, refresh) leave the instance status to
    a refresh: the cluster kept running."""
    kind, iid, cid = op["kind"], op["instance_id"], op["correlation_id"]
    if kind == "deploy":
        for m in _members(conn, iid, ("pending", "joining")):
            move_member(conn, m["id"], "failed", reason, cid)
        move_instance(conn, iid, "failed", reason, cid)
    elif kind == "decommission":
        move_instance(conn, iid, "failed", reason, cid)
    elif kind in ("member_add", "member_replace"):
        move_member(conn, _new_member(op), "failed", reason, cid)
    elif kind in ("member_drain", "member_resume", "member_remove"):
        move_member(conn, op["member_ids"][0], "failed", reason, cid)


def on_cancel_queued(conn: psycopg.Connection, op: dict) -> None:
    """Nothing ran: a member created for this request never joined, so it is removed."""
    if op["kind"] in ("member_add", "member_replace"):
        move_member(conn, _new_member(op), "removed", "operation canceled before it ran", op["correlation_id"])
        conn.execute("""UPDATE app_instances SET topology = (SELECT jsonb_build_object('roles', jsonb_agg(
                            CASE WHEN r->>'name' = m.role THEN jsonb_set(r, '{desired_count}',
                                 to_jsonb((r->>'desired_count')::int - 1)) ELSE r END))
                          FROM jsonb_array_elements(topology->'roles') r, app_instance_members m
                         WHERE m.id = %s) WHERE id = %s""", (_new_member(op), op["instance_id"]))

"""The health record: which instances are due for a check (claimed fairly across tenants, one check in
flight per instance), and what a check's verdict changes. Every function takes a connection inside the
caller's transaction.

A check never holds up a lifecycle operation and never contradicts one: it moves no member that a
queued or running operation targets, no member or instance whose status changed after the check
started, and no status at all while an instance-level run (deploy, reconfigure, upgrade, rollback,
decommission) is in flight. It still records what it read."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from ..audit import service as audit
from ..instances import service as instances
from ..operations import truth
from ..operations.kinds import KINDS
from .verdict import Verdict

# The reason prefix of every status the check sets: a failed instance is checked again (and may
# recover) only while the check is what failed it.
PREFIX = "health check: "
# Joining and removing members belong to the run that moves them.
MOVABLE = ("active", "draining", "drained", "failed")

# Due instances, the most overdue first, one per tenant per round: a walk of the (health_due_at, id)
# index in due order that passes over tenants it already took. Taking n reads the n instances plus the
# leased ones and those of tenants already taken that lie ahead of them: a claim of one (what a health
# thread asks) costs the same at 10 or 10,000 instances and tenants. A failed instance is checkable
# only while the check is what failed it (the index holds no other failed one).
CLAIM = """
WITH RECURSIVE due AS (
    (SELECT id, tenant_id, health_due_at, %(skip)s::uuid[] || tenant_id AS taken FROM app_instances
      WHERE deleted_at IS NULL
        AND (status IN ('running', 'degraded') OR (status = 'failed' AND status_reason LIKE 'health check: %%'))
        AND health_due_at <= now() AND (health_lease_until IS NULL OR health_lease_until < now())
        AND tenant_id <> ALL (%(skip)s::uuid[])
      ORDER BY health_due_at, id LIMIT 1)
  UNION ALL
    SELECT n.id, n.tenant_id, n.health_due_at, d.taken || n.tenant_id FROM due d CROSS JOIN LATERAL (
        SELECT id, tenant_id, health_due_at FROM app_instances
         WHERE deleted_at IS NULL
           AND (status IN ('running', 'degraded') OR (status = 'failed' AND status_reason LIKE 'health check: %%'))
           AND health_due_at <= now() AND (health_lease_until IS NULL OR health_lease_until < now())
           AND (health_due_at, id) > (d.health_due_at, d.id) AND tenant_id <> ALL (d.taken)
         ORDER BY health_due_at, id LIMIT 1) n
     WHERE cardinality(d.taken) < %(n)s + cardinality(%(skip)s::uuid[])
)
UPDATE app_instances SET health_lease_until = now() + make_interval(secs => %(lease)s), health_worker = %(w)s
 -- arrays, so that the rows are found by primary key: the planner cannot tell how few the walk returns
 WHERE id = ANY (ARRAY(SELECT id FROM app_instances WHERE id = ANY (ARRAY(SELECT id FROM due))
                        FOR UPDATE SKIP LOCKED))
RETURNING *, now() AS check_started_at"""


# Tenants with a check in flight now (a handful: at most one per checker thread).
IN_FLIGHT = """SELECT coalesce(array_agg(DISTINCT tenant_id), '{}') AS tenants FROM app_instances
                WHERE health_lease_until > now() AND deleted_at IS NULL"""


def claim(conn: psycopg.Connection, worker: str, n: int, lease_seconds: float) -> list[dict]:
    """Up to `n` due instances, one per tenant, most overdue first, leased to `worker` for `lease_seconds`.
    Tenants that have no check in flight go first: a tenant with many instances gets a second checker
    only once every other tenant with a due instance has one."""
    busy = conn.execute(IN_FLIGHT).fetchone()["tenants"]
    rows = conn.execute(CLAIM, {"n": n, "lease": lease_seconds, "w": worker, "skip": busy}).fetchall() if busy \
        else []
    return rows or conn.execute(CLAIM, {"n": n, "lease": lease_seconds, "w": worker, "skip": []}).fetchall()


def any_due(conn: psycopg.Connection) -> bool:
    return conn.execute("""SELECT EXISTS (SELECT 1 FROM app_instances WHERE deleted_at IS NULL
                             AND (status IN ('running', 'degraded')
                                  OR (status = 'failed' AND status_reason LIKE 'health check: %'))
                             AND health_due_at <= now()
                             AND (health_lease_until IS NULL OR health_lease_until < now()))""").fetchone()["exists"]


def release(conn: psycopg.Connection, instance_id: UUID, worker: str, interval_seconds: float) -> None:
    """The check is over (whatever it found): the next is due `interval_seconds` later."""
    conn.execute("""UPDATE app_instances SET health_lease_until = NULL, health_worker = NULL,
                        health_due_at = now() + make_interval(secs => %s)
                     WHERE id = %s AND health_worker = %s""", (interval_seconds, instance_id, worker))


def _busy(conn: psycopg.Connection, instance_id: UUID) -> tuple[set[str], bool]:
    """(members a queued or running operation targets, whether an instance-level run is in flight)."""
    rows = conn.execute("""SELECT kind, status, member_ids FROM operations
                            WHERE instance_id = %s AND status IN ('queued', 'running')""", (instance_id,)).fetchall()
    targeted = {str(m) for r in rows for m in (r["member_ids"] or [])}
    instance_run = any(r["status"] == "running" and not KINDS[r["kind"]].targets for r in rows)
    return targeted, instance_run


def _condition(before: dict | None, kind: str, ok: bool, reason: str, message: str, now: datetime) -> dict:
    """A Kubernetes-style condition; last_transition_at moves only when its status does."""
    status = "True" if ok else "False"
    since = before["last_transition_at"] if before and before.get("status") == status else now.isoformat()
    return {"type": kind, "status": status, "reason": reason, "message": message, "last_transition_at": since}


def record(conn: psycopg.Connection, instance: dict, verdict: Verdict, *, checked: dict,
           correlation_id: str) -> bool:
    """Apply a check's verdict to the instance (locked here) and its members. `instance` is the row the
    claim returned; `checked` says what ran. A failure moves a status only when the check before read
    it too: a blip (Slurm shows a resumed node as not responding for about a second) is not a failed
    member. Returns True when a failure waits for that second read (the next check should come soon)."""
    current = instances.get_instance(conn, instance["id"], lock=True, include_deleted=True)
    now = conn.execute("SELECT now() AS now").fetchone()["now"]
    started = instance["check_started_at"]
    targeted, instance_run = _busy(conn, instance["id"])
    rows = {str(r["id"]): r for r in conn.execute(
        "SELECT id, status, updated_at, node_name, runtime FROM app_instance_members WHERE instance_id = %s",
        (instance["id"],)).fetchall()}
    failed_members, unconfirmed = [], False
    for mid, v in verdict.members.items():
        row = rows.get(mid)
        if row is None:
            continue
        runtime = {"checked_at": now.isoformat(), "reachable": v.reachable, "observed": v.observed,
                   "reason": v.reason, "details": v.details}
        conn.execute("UPDATE app_instance_members SET runtime = %s WHERE id = %s", (Jsonb(runtime), row["id"]))
        settled = not instance_run and mid not in targeted and row["updated_at"] <= started
        status = row["status"]
        confirmed = v.observed != "failed" or (row["runtime"] or {}).get("observed") == "failed"
        unconfirmed |= not confirmed and status != "failed"
        if settled and confirmed and v.observed and v.observed != status and status in MOVABLE:
            why = PREFIX + (v.reason or f"read {v.observed}")
            truth.move_member(conn, row["id"], v.observed, why, correlation_id)
            status = v.observed
        if status == "failed":
            failed_members.append(f"{row['node_name']}: {v.reason or 'failed'}" if v.observed == "failed"
                                  else f"{row['node_name']}: failed")
    before = {c["type"]: c for c in (current["health"] or {}).get("conditions", [])}
    # The control plane counts as down once two reads in a row found it so.
    read_down_before = (current["health"] or {}).get("control_plane_read") is False
    control_plane = verdict.control_plane or not (read_down_before or current["status"] == "failed")
    if not verdict.control_plane and control_plane:
        unconfirmed = True
        verdict_message = ""
    else:
        verdict_message = verdict.control_plane_message
    goal = "failed" if not control_plane else ("degraded" if failed_members else "running")
    if goal == "failed":
        reason = PREFIX + "the control plane did not answer: " + verdict_message
    elif failed_members:
        reason = PREFIX + f"{len(failed_members)} member(s) failed: " + "; ".join(failed_members[:5])
    else:
        reason = PREFIX + "every member answered"
    if not instance_run and current["updated_at"] <= started and current["status"] != goal \
            and current["status"] in ("running", "degraded", "failed"):
        truth.move_instance(conn, instance["id"], goal, reason[:1000], correlation_id, by_check=True)
    conditions = [
        _condition(before.get("ControlPlaneAvailable"), "ControlPlaneAvailable", control_plane,
                   "Answered" if control_plane else "NoAnswer", verdict_message, now),
        _condition(before.get("MembersHealthy"), "MembersHealthy", not failed_members,
                   "AllMembersHealthy" if not failed_members else "MembersFailed", "; ".join(failed_members[:20]), now),
    ]
    healthy = control_plane and not failed_members
    conditions.append(_condition(before.get("Healthy"), "Healthy", healthy, "Checked" if healthy else "Unhealthy",
                                 "" if healthy else reason.removeprefix(PREFIX), now))
    health = {"checked_at": now.isoformat(), "check": checked, "conditions": conditions,
              "control_plane_read": verdict.control_plane}
    conn.execute("UPDATE app_instances SET health = %s WHERE id = %s", (Jsonb(health), instance["id"]))
    was = before.get("Healthy", {}).get("status")
    if was != conditions[-1]["status"]:
        audit.append_event(conn, current, "healthy" if healthy else "unhealthy",
                           checked | {"failed_members": failed_members[:20],
                                      "control_plane": control_plane,
                                      "reason": "" if healthy else reason.removeprefix(PREFIX)},
                           correlation_id=correlation_id)
    return unconfirmed

"""Instance and member status follow what a run proved. One function per phase of an operation:
before the run (what is about to happen), after success, after failure (including timeout, cancel
while running and a lost worker), and after a cancel before the run. Each applies the phase's steps
from the kind's row in operations/kinds.py: status moves, which take the legal path through the
status machines (so every step appears on the timeline), and the named effects below."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from ..audit import service as audit
from ..instances import rules as irules
from ..instances import service as instances
from .kinds import INSTANCE, KINDS, LIVE, Effect, Members, Step

log = logging.getLogger(__name__)


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


def move_instance(conn: psycopg.Connection, instance_id: UUID, goal: str, reason: str, cid: str, *,
                  by_check: bool = False) -> None:
    current = instances.get_instance(conn, instance_id, include_deleted=True)
    table = irules.INSTANCE_TRANSITIONS if by_check else {
        s: frozenset(t for t in to if (s, t) not in irules.CHECK_ONLY) for s, to in irules.INSTANCE_TRANSITIONS.items()}
    path = _path(table, current["status"], goal)
    if path is None:
        log.warning("instance %s: no legal path from %s to %s", instance_id, current["status"], goal)
        return
    for step in path:
        instances.transition_instance(conn, instance_id, step, reason=reason, correlation_id=cid, by_check=by_check)


def _members(conn, instance_id: UUID, statuses: tuple[str, ...]) -> list[dict]:
    return conn.execute("SELECT * FROM app_instance_members WHERE instance_id = %s AND status = ANY(%s) ORDER BY seq",
                        (instance_id, list(statuses))).fetchall()


def targets(op: dict, name: str) -> list[UUID]:
    """The member ids an operation targets under one name (members, old, new)."""
    return [UUID(m) for m in op["params"].get("targets", {}).get(name, [])]


@dataclass
class Phase:
    """What a phase's effects may read: the operation, the instance as it was when the phase began,
    the members its pseudo-target moves selected, and (refresh) the run's outcome."""
    conn: psycopg.Connection
    op: dict
    instance: dict
    reason: str
    outcome: dict = field(default_factory=dict)
    selected: list[dict] = field(default_factory=list)

    def event(self, event_type: str, payload: dict) -> None:
        audit.append_event(self.conn, self.instance, event_type, payload, correlation_id=self.op["correlation_id"])


def _apply(conn: psycopg.Connection, op: dict, steps: tuple[Step, ...], reason: str,
           outcome: dict | None = None, skip: frozenset = frozenset()) -> None:
    """Apply the steps; members in `skip` (ids) are left where they are."""
    phase = Phase(conn, op, instances.get_instance(conn, op["instance_id"], include_deleted=True), reason,
                  outcome or {})
    cid = op["correlation_id"]
    for step in steps:
        if isinstance(step, Effect):
            EFFECTS[step.name](phase)
        elif step.who == INSTANCE:
            move_instance(conn, op["instance_id"], step.to, reason, cid)
        elif isinstance(step.who, Members):
            chosen = [m for m in _members(conn, op["instance_id"], step.who.statuses) if m["id"] not in skip]
            phase.selected += chosen
            for m in chosen:
                move_member(conn, m["id"], step.to, reason, cid)
        else:
            for member_id in targets(op, step.who):
                if member_id not in skip:
                    move_member(conn, member_id, step.to, reason, cid)


def on_start(conn: psycopg.Connection, op: dict) -> None:
    """Idempotent: a re-attempt after a lost lease finds the statuses already moved."""
    _apply(conn, op, KINDS[op["kind"]].on_start, f"{op['kind']} running (operation {op['id']})")


def on_success(conn: psycopg.Connection, op: dict, outcome: dict) -> None:
    _apply(conn, op, KINDS[op["kind"]].on_success, f"{op['kind']} succeeded (operation {op['id']})", outcome)


def on_failure(conn: psycopg.Connection, op: dict, reason: str, outcome: dict | None = None) -> None:
    """What is known after a failed, timed-out, canceled-while-running or abandoned run: the members
    the run was changing are failed with the reason; deploy and decommission fail the instance.
    A run that failed on some hosts only and ran to the end on every other (outcome["failed_hosts"],
    see _on_hosts_failed) changes the members on those hosts alone."""
    failed_hosts = (outcome or {}).get("failed_hosts")
    if failed_hosts and op["kind"] != "decommission" and _on_hosts_failed(conn, op, failed_hosts, outcome):
        return
    _apply(conn, op, KINDS[op["kind"]].on_failure, reason)


def _on_hosts_failed(conn: psycopg.Connection, op: dict, failed_hosts: dict[str, dict], outcome: dict) -> bool:
    """A failure belongs to the host it happened on. Ansible takes a failed host out of the run and
    runs every play to the end on the others (the worker passes failed_hosts only when it did: no
    "no hosts left" abort, no timeout or cancel). So the members on the failed hosts become failed,
    each with its own host's reason, and every other member takes the moves a success gives; an
    instance left with a failed member is degraded. False (nothing done) when a failed host is not a
    member's host (the control node, say): then nothing is known of the members."""
    members = conn.execute("""SELECT id, node_name FROM app_instance_members
                               WHERE instance_id = %s AND status <> 'removed'""", (op["instance_id"],)).fetchall()
    on_failed = {m["id"]: failed_hosts[m["node_name"]] for m in members if m["node_name"] in failed_hosts}
    if len({m["node_name"] for m in members} & set(failed_hosts)) < len(failed_hosts):
        return False
    cid = op["correlation_id"]
    for member_id, failure in on_failed.items():
        what = "unreachable" if failure.get("unreachable") else f"task {failure.get('task')!r} failed"
        move_member(conn, member_id, "failed",
                    f"{op['kind']} (operation {op['id']}): {what} on {failure.get('host')}: {failure.get('message')}",
                    cid)
    _apply(conn, op, KINDS[op["kind"]].on_success,
           f"{op['kind']} succeeded on every other host (operation {op['id']})", outcome, skip=frozenset(on_failed))
    instance = instances.get_instance(conn, op["instance_id"], include_deleted=True)
    if instance["status"] in ("running", "starting"):
        move_instance(conn, op["instance_id"], "degraded",
                      f"{len(on_failed)} member(s) failed in {op['kind']} (operation {op['id']})", cid)
    # What else the failure means (a control plane on a failed host fails the instance) is for a check to read.
    instances.check_health_soon(conn, op["instance_id"])
    return True


def on_cancel_queued(conn: psycopg.Connection, op: dict) -> None:
    """Nothing ran: a member created for this request never joined, so it is removed."""
    _apply(conn, op, KINDS[op["kind"]].on_cancel_queued, "operation canceled before it ran")


# Named effects: what a phase does besides moving statuses --------------------------------------------

def _deploy_proven(p: Phase) -> None:
    """The deploy's members joined. Whether the instance is healthy is for the health check to read:
    its first check is due at once."""
    p.event("start_completed", {"operation_id": str(p.op["id"]), "members": len(p.selected)})
    instances.check_health_soon(p.conn, p.instance["id"])


def _forced_cleanup(p: Phase) -> None:
    """The leaving members whose hosts the run was told to leave alone (unreachable, params.forced)
    are gone from the instance; their hosts still carry what the app installed, so each is marked for
    the adapter's cleanup playbook, which runs once the host answers again (health/cleanup.py)."""
    forced = [UUID(m) for m in p.op["params"].get("forced", [])]
    if not forced:
        return
    rows = p.conn.execute("""INSERT INTO host_cleanups (instance_id, member_id, app_version_id, allocation_id,
                                    host_name, node_name, role, reason, correlation_id)
                             SELECT m.instance_id, m.id, %s, m.allocation_id, m.host_name, m.node_name, m.role, %s, %s
                               FROM app_instance_members m WHERE m.id = ANY(%s)
                             ON CONFLICT DO NOTHING RETURNING member_id, node_name""",
                          (p.instance["app_version_id"], f"removed while unreachable ({p.op['kind']} {p.op['id']})",
                           p.op["correlation_id"], forced)).fetchall()
    for r in rows:
        p.event("host_cleanup_pending", {"member_id": str(r["member_id"]), "node_name": r["node_name"],
                                         "operation_id": str(p.op["id"])})


def _store_parameters(p: Phase) -> None:
    parameters = p.instance["parameters"] | p.op["params"]["request"].get("parameters", {})
    p.conn.execute("UPDATE app_instances SET parameters = %s, updated_at = now() WHERE id = %s",
                   (Jsonb(parameters), p.instance["id"]))
    p.event("apps.instance.reconfigured", {"operation_id": str(p.op["id"])})


def _switch_version(event_type: str) -> Callable[[Phase], None]:
    def switch(p: Phase) -> None:
        target, current = UUID(p.op["params"]["target_version_id"]), p.instance["app_version_id"]
        p.conn.execute("""UPDATE app_instances SET previous_version_id = app_version_id, app_version_id = %s,
                              updated_at = now() WHERE id = %s""", (target, p.instance["id"]))
        versions = p.conn.execute("SELECT id, version FROM app_versions WHERE id = ANY(%s)",
                                  ([current, target],)).fetchall()
        names = {v["id"]: v["version"] for v in versions}
        p.event(event_type, {"from": names.get(current), "to": names.get(target)})
    return switch


def _deleting(p: Phase) -> None:
    if p.instance["status"] != "stopping":  # a re-attempt announced it already
        p.event("apps.instance.deleting", {"operation_id": str(p.op["id"])})


def _deleted(p: Phase) -> None:
    p.event("apps.instance.deleted",
            {"operation_id": str(p.op["id"]), "runtime": "torn down and verified by the playbook"})


def _apply_observed(p: Phase) -> None:
    """outcome["observed"]: member id -> status read from the runtime (None: unknown, left alone)."""
    observed: dict[str, str | None] = p.outcome.get("observed", {})
    changed = 0
    for m in _members(p.conn, p.instance["id"], LIVE + ("failed",)):
        goal = observed.get(str(m["id"]))
        if goal and goal != m["status"]:
            move_member(p.conn, m["id"], goal, p.reason, p.op["correlation_id"])
            changed += 1
    p.event("refresh_completed", {"observed": len(observed), "changed": changed})
    instances.check_health_soon(p.conn, p.instance["id"])


def _uncount_created(p: Phase) -> None:
    """The member the request created is gone: its role's desired count goes back down."""
    for member_id in targets(p.op, KINDS[p.op["kind"]].creates):
        p.conn.execute("""UPDATE app_instances SET topology = (SELECT jsonb_build_object('roles', jsonb_agg(
                              CASE WHEN r->>'name' = m.role THEN jsonb_set(r, '{desired_count}',
                                   to_jsonb((r->>'desired_count')::int - 1)) ELSE r END))
                            FROM jsonb_array_elements(topology->'roles') r, app_instance_members m
                           WHERE m.id = %s) WHERE id = %s""", (member_id, p.instance["id"]))


EFFECTS: dict[str, Callable[[Phase], None]] = {
    "deploy_proven": _deploy_proven, "store_parameters": _store_parameters, "forced_cleanup": _forced_cleanup,
    "upgraded": _switch_version("apps.instance.upgraded"), "rolled_back": _switch_version("apps.instance.rolled_back"),
    "deleting": _deleting, "deleted": _deleted, "apply_observed": _apply_observed, "uncount_created": _uncount_created,
}

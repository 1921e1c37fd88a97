"""App instances and their members: creation through the entitlement, policy and compatibility gates,
legal-only status transitions, member lifecycle, the event timeline. Every function takes a
connection inside the caller's transaction, so an HTTP handler and a worker process (issue 4: the
operations queue) drive the same rules."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from .. import quotas
from ..allocations import service as allocations_service
from ..allocations.service import get_allocations
from ..audit import service as audit
from ..catalog import parameters
from ..catalog.adapter import stored_spec
from ..catalog.scope import app_for_project
from ..catalog.service import (
    check_version_artifacts,
    get_version,
    get_version_by_id,
    latest_active_version,
    version_artifacts,
)
from ..common import page_of
from ..errors import ApiError, conflict, not_found, unprocessable
from ..iam.auth import SYSTEM, Principal
from ..policy import rules as policy_rules
from ..policy.service import is_entitled, overlays_for
from . import inventory, rules

VIEW_SELECT = """
SELECT i.*, v.version AS app_version, a.reference AS artifact_reference,
       w.reference AS workload_artifact_reference,
       (SELECT coalesce(json_object_agg(c.role, c.by_status), '{}'::json)
          FROM (SELECT s.role, json_object_agg(s.status, s.n) AS by_status
                  FROM (SELECT m.role, m.status, count(*) AS n FROM app_instance_members m
                         WHERE m.instance_id = i.id AND m.status <> 'removed' GROUP BY m.role, m.status) s
                 GROUP BY s.role) c) AS member_counts
  FROM app_instances i
  JOIN app_versions v ON v.id = i.app_version_id
  JOIN artifacts a ON a.id = v.artifact_id
  LEFT JOIN artifacts w ON w.id = v.workload_artifact_id
"""

MEMBER_SELECT = """
SELECT m.*, (SELECT h FROM jsonb_array_elements(al.hosts) h WHERE h->>'name' = m.host_name LIMIT 1) AS host,
       (SELECT json_build_object('id', o.id, 'kind', o.kind, 'status', o.status, 'correlation_id', o.correlation_id,
                                 'created_at', o.created_at, 'finished_at', o.finished_at)
          FROM operations o WHERE o.instance_id = m.instance_id
           -- one that named it, or one that ran on the whole instance once it was there
           AND (m.id = ANY(o.member_ids) OR (cardinality(o.member_ids) = 0 AND o.created_at >= m.created_at))
         ORDER BY o.seq DESC LIMIT 1) AS last_operation
  FROM app_instance_members m JOIN allocations al ON al.id = m.allocation_id
"""


def view(row: dict) -> dict:
    """Shape an instance row (from VIEW_SELECT) for the API: topology with desired and live counts, and
    each role's members by status (its health at a glance)."""
    counts = row.get("member_counts") or {}
    roles = [{"name": r["name"], "desired_count": r["desired_count"],
              "member_count": sum((counts.get(r["name"]) or {}).values()),
              "members_by_status": counts.get(r["name"]) or {}}
             for r in row["topology"]["roles"]]
    return {**row, "topology": {"roles": roles}}


def get_instance(conn: psycopg.Connection, instance_id: UUID, *, lock: bool = False,
                 include_deleted: bool = False) -> dict:
    sql = "SELECT * FROM app_instances WHERE id = %s" + (" FOR UPDATE" if lock else "")  # noqa: S608 - constant
    row = conn.execute(sql, (instance_id,)).fetchone()
    if row is None or (row["deleted_at"] is not None and not include_deleted):
        raise not_found("app_instance", instance_id)
    return row


def get_instance_view(conn: psycopg.Connection, instance_id: UUID, *, include_deleted: bool = False) -> dict:
    row = conn.execute(VIEW_SELECT + " WHERE i.id = %s", (instance_id,)).fetchone()
    if row is None or (row["deleted_at"] is not None and not include_deleted):
        raise not_found("app_instance", instance_id)
    return view(row)


def list_instances(conn: psycopg.Connection, *, project_id: UUID | None = None, tenant_id: UUID | None = None,
                   status: str | None = None, app_slug: str | None = None, before: int | None = None,
                   limit: int = 50) -> tuple[list[dict], str | None]:
    """Newest first, keyset-paginated on seq (index app_instances_project)."""
    rows = conn.execute(
        VIEW_SELECT + """
         WHERE i.deleted_at IS NULL
           AND (%(p)s::uuid IS NULL OR i.project_id = %(p)s)
           AND (%(t)s::uuid IS NULL OR i.tenant_id = %(t)s)
           AND (%(status)s::text IS NULL OR i.status = %(status)s)
           AND (%(slug)s::text IS NULL OR i.app_slug = %(slug)s)
           AND (%(before)s::bigint IS NULL OR i.seq < %(before)s)
         ORDER BY i.seq DESC LIMIT %(limit)s""",
        {"p": project_id, "t": tenant_id, "status": status, "slug": app_slug, "before": before,
         "limit": limit + 1},
    ).fetchall()
    items, nxt = page_of(rows, limit)
    return [view(r) for r in items], nxt


def check_version_usable(version: dict, *, canary: bool, rollback: bool = False, smoke: bool = False) -> None:
    """A new binding (create, upgrade) needs an active version, or a canary one for an instance that
    opted in to canary versions; a rollback may return to a version deprecated since. Never onto an
    artifact that is not active (or canary, for an instance that opted in) (409). A smoke instance (a smoke
    gate's, catalog/smoke.py) binds the draft version under test alone, on artifacts a canary version may use."""
    if smoke:
        if version["status"] != "draft":
            raise conflict("version_not_usable", f"a smoke run tests a draft version; {version['version']} is "
                           f"{version['status']}", version=version["version"], status=version["status"])
        check_version_artifacts(version, "canary")
        return
    usable = {"active", "canary"} if canary else {"active"}
    if version["status"] not in usable and not rollback:
        hint = " (an instance that opted in to canary versions may bind a canary one)" if not canary else ""
        raise conflict("version_not_usable", f"version {version['version']} is {version['status']}; only an "
                       f"active version can be bound{hint}", version=version["version"], status=version["status"])
    for reference, status in version_artifacts(version):
        if status not in usable:
            raise conflict("artifact_not_active", f"artifact {reference} of version {version['version']} is "
                           f"{status}", version=version["version"], artifact_reference=reference,
                           artifact_status=status)


def check_binding(conn: psycopg.Connection, tenant_id: UUID, project_id: UUID, version: dict,
                  allocations: dict[UUID, dict], members: list[rules.PlannedMember],
                  problems: list[dict] | None = None) -> None:
    """The one gate for every path that binds capacity or a version to an instance (create, member
    add, replace, upgrade, rollback): entitlement and policy overlays on the version's registry and
    on every allocation (403), then compatibility of each allocation and of the whole topology (422,
    together with the `problems` the caller found)."""
    if not is_entitled(conn, project_id, version["app_slug"]):
        raise ApiError(403, "not_entitled", f"project is not entitled to app {version['app_slug']}",
                       {"app_slug": version["app_slug"]})
    overlay_rows = overlays_for(conn, tenant_id, project_id)
    checks = [("artifact_registry", version["artifact_registry"], f"artifact {version['artifact_reference']}")]
    if version.get("workload_artifact_id"):
        checks.append(("artifact_registry", version["workload_artifact_registry"],
                       f"artifact {version['workload_artifact_reference']}"))
    for a in allocations.values():
        subject = f"allocation {a['name']}"
        checks += [("region", a["region"], subject), ("capacity_shape", a["capacity_shape"], subject)]
        if any(o["dimension"] == "sku" for o in overlay_rows):
            checks.append(("sku", a["sku"], subject))
    denied = policy_rules.violations(overlay_rows, checks)
    if denied:
        raise ApiError(403, "policy_denied", "policy overlays refuse this binding", {"reasons": denied})
    compat = version["compatibility"]
    problems = list(problems or [])
    for a in allocations.values():
        problems += rules.allocation_problems(compat, a)
    problems += rules.topology_problems(compat, members, allocations)
    problems += rules.exclusive_problems(exclusive_roles(version), members)
    if problems:
        raise ApiError(422, "compatibility_refused", "the chosen allocations and topology cannot run this app",
                       {"reasons": problems})


def exclusive_roles(version: dict) -> set[str]:
    return {r["name"] for r in version["adapter"]["roles"] if r.get("exclusive")}


def shares_hosts(version: dict) -> bool:
    return bool(version["compatibility"].get("shares_hosts"))


def refuse_busy(hosts: set[rules.Host]) -> None:
    if hosts:
        names = sorted(h for _, h in hosts)
        raise conflict("host_in_use", f"host(s) {', '.join(names)} already carry another instance's members, "
                       "or wait for the cleanup of a member removed while unreachable", hosts=names)


def check_version_change(conn: psycopg.Connection, instance: dict, version: dict) -> None:
    """Upgrade and rollback bind another version to the capacity the instance holds: the same gate as
    create, for its current members and desired topology (roles the version adds count as 0)."""
    live = conn.execute("""SELECT role, allocation_id, host_name FROM app_instance_members
                            WHERE instance_id = %s AND status <> 'removed'""", (instance["id"],)).fetchall()
    members = [rules.PlannedMember(m["role"], m["allocation_id"], m["host_name"]) for m in live]
    allocations = get_allocations(conn, list({m.allocation_id for m in members}))
    requested = [{"role": r["name"], "count": r["desired_count"]} for r in instance["topology"]["roles"]]
    requested += [{"role": r["name"], "count": 0} for r in version["adapter"]["roles"]
                  if r["name"] not in {x["role"] for x in requested}]
    _, problems = rules.desired_counts(version["adapter"], requested)
    if not shares_hosts(version):  # the instance may sit on shared hosts that this version cannot share
        allocations_service.lock_hosts(conn)
        busy = allocations_service.busy_hosts(conn, list(allocations), instance_id=instance["id"],
                                              shares_hosts=False)
        refuse_busy({(m.allocation_id, m.host_name) for m in members} & busy)
    check_binding(conn, instance["tenant_id"], instance["project_id"], version, allocations, members, problems)


def create_instance(conn: psycopg.Connection, actor: Principal, project: dict, body: Any, *,
                    max_instances: int = 0, smoke_gate_id: UUID | None = None) -> dict:
    """Create a project-owned instance with its members placed on the chosen allocations, or refuse
    and say exactly why: version/artifact state (409), a host another instance holds (409),
    entitlement and policy (403), compatibility (422), the project's instance quota (429; 0: none).
    `smoke_gate_id`: the smoke instance of that gate, bound to the draft version it tests."""
    app = app_for_project(conn, actor, project, body.app_slug)  # another tenant's private app: as a missing one
    version = get_version(conn, app["slug"], body.version) if body.version else latest_active_version(conn, app["slug"])
    check_version_usable(version, canary=body.canary, smoke=smoke_gate_id is not None)
    parameters.validate_for_version(version, body.parameters)
    runtime = rules.decide_runtime(app, body.operating_mode, body.control_plane_scope)
    if runtime.control_plane_scope == "tenant":
        check_shared_runtime(conn, actor, project, version, body)
    elif {"environment", "attachable_project_ids"} & body.model_fields_set:
        raise unprocessable("validation_error", "environment and attachable_project_ids belong to a tenant-shared "
                            "runtime (control_plane_scope tenant)")
    quotas.enforce(conn, project["id"], "instances", max_instances)

    ids = list(dict.fromkeys(body.allocation_ids))
    found = get_allocations(conn, ids)
    problems = [rules.reason("allocation.unknown", f"allocation {a} is not held by this project", allocation_id=a)
                for a in ids if a not in found or found[a]["project_id"] != project["id"]]
    allocations = [found[a] for a in ids if a in found and found[a]["project_id"] == project["id"]]

    requested = [r.model_dump() for r in body.topology]
    counts, topo_problems = rules.desired_counts(version["adapter"], requested)
    problems += topo_problems
    members: list[rules.PlannedMember] = []
    allocations_service.lock_hosts(conn)
    if not topo_problems and allocations:
        busy = allocations_service.busy_hosts(conn, [a["id"] for a in allocations], instance_id=None,
                                              shares_hosts=shares_hosts(version))
        members, placement_problems = rules.place(counts, requested, allocations, busy,
                                                  exclusive_roles(version))
        problems += placement_problems
        refuse_busy({(m.allocation_id, m.host_name) for m in members} & busy)
    check_binding(conn, project["tenant_id"], project["id"], version, {a["id"]: a for a in allocations}, members,
                  problems)

    used = {m.allocation_id for m in members} or {allocations[0]["id"]}
    shapes = sorted({a["capacity_shape"] for a in allocations if a["id"] in used})
    topology = {"roles": [{"name": n, "desired_count": c} for n, c in counts.items()]}
    instance = conn.execute(
        """INSERT INTO app_instances (tenant_id, project_id, name, app_slug, app_version_id, operating_mode,
               operating_mode_hint, control_plane_scope, runtime_backend, tenant_boundary_mode,
               bound_capacity_shape, topology, labels, created_by, parameters, canary, environment,
               attachable_project_ids, smoke_gate_id)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *""",
        (project["tenant_id"], project["id"], body.name, app["slug"], version["id"], runtime.operating_mode,
         body.operating_mode, runtime.control_plane_scope, runtime.runtime_backend, runtime.tenant_boundary_mode,
         "+".join(shapes), Jsonb(topology), Jsonb(body.labels), actor.id, Jsonb(body.parameters), body.canary,
         body.environment, list(dict.fromkeys(body.attachable_project_ids)), smoke_gate_id),
    ).fetchone()
    if runtime.control_plane_scope == "tenant":  # its own project is attached for as long as it lives
        conn.execute("""INSERT INTO instance_attachments (instance_id, tenant_id, project_id, owner, status, reason,
                            created_by) VALUES (%s, %s, %s, true, 'attached', 'owner', %s)""",
                     (instance["id"], project["tenant_id"], project["id"], actor.id))
    nodes = rules.node_names([(m.allocation_id, m.host_name) for m in members],
                             {a["id"]: a["seq"] for a in allocations}, {})
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO app_instance_members (instance_id, role, allocation_id, host_name, node_name,
                   last_correlation_id) VALUES (%s, %s, %s, %s, %s, %s)""",
            [(instance["id"], m.role, m.allocation_id, m.host_name, nodes[(m.allocation_id, m.host_name)], None)
             for m in members],
        )
    audit.append_event(conn, instance, "apps.instance.requested", {
        "app_version": version["version"], "artifact_reference": version["artifact_reference"],
        "workload_artifact_reference": version["workload_artifact_reference"], "canary": body.canary,
        "topology": topology, "allocation_ids": [str(a) for a in ids],
        **({"smoke_gate_id": str(smoke_gate_id)} if smoke_gate_id else {}),
        "hints": {"operating_mode": body.operating_mode, "control_plane_scope": body.control_plane_scope},
    })
    audit.record(conn, actor, "apps.instance.create", "app_instance", instance["id"],
                 after={"name": body.name, "app_version": version["version"], "topology": topology},
                 context=audit.instance_context(instance))
    return get_instance_view(conn, instance["id"])


def check_shared_runtime(conn: psycopg.Connection, actor: Principal, project: dict, version: dict, body: Any) -> None:
    """A tenant-shared runtime (docs/tenant-shared.md): a tenant admin's request, for an app whose runtime keeps
    per-project accounts and serves jobs (its adapter declares access and a scheduler), one per tenant, app and
    environment, with an allowlist of the tenant's own projects."""
    actor.require("apps.shared_runtime.manage", tenant_id=project["tenant_id"])
    spec = stored_spec(version)
    if not (spec.access and spec.scheduler):
        raise unprocessable("scope_not_supported", f"app {version['app_slug']} keeps no per-project accounts and "
                            "jobs (its adapter declares no access or no scheduler), so projects cannot share it",
                            control_plane_scope="tenant")
    existing = conn.execute(
        """SELECT id, name, project_id FROM app_instances WHERE tenant_id = %s AND app_slug = %s AND environment = %s
              AND control_plane_scope = 'tenant' AND deleted_at IS NULL""",
        (project["tenant_id"], version["app_slug"], body.environment)).fetchone()
    if existing:
        raise conflict("shared_runtime_exists", f"the tenant already has a shared {version['app_slug']} runtime for "
                       f"environment {body.environment} ({existing['name']}); attach this project to it instead "
                       f"(POST /v1/instances/{existing['id']}/attachments)", instance_id=str(existing["id"]))
    check_allowlist(conn, actor, {"tenant_id": project["tenant_id"], "control_plane_scope": "tenant"},
                    body.attachable_project_ids)


def check_allowlist(conn: psycopg.Connection, actor: Principal, instance: dict, project_ids: list[UUID]) -> list[UUID]:
    """A shared runtime's allowlist of attachable projects: a tenant admin's, projects of its own tenant only."""
    if instance["control_plane_scope"] != "tenant":
        raise conflict("not_shared", "only a tenant-shared runtime (control_plane_scope tenant) has attachable "
                       "projects")
    actor.require("apps.shared_runtime.manage", tenant_id=instance["tenant_id"])
    project_ids = list(dict.fromkeys(project_ids))
    foreign = [str(p) for p in project_ids if conn.execute(
        "SELECT 1 FROM projects WHERE id = %s AND tenant_id = %s", (p, instance["tenant_id"])).fetchone() is None]
    if foreign:
        raise unprocessable("project_not_in_tenant", "attachable projects must be projects of this tenant",
                            project_ids=foreign)
    return project_ids


def transition_instance(conn: psycopg.Connection, instance_id: UUID, target: str, *, reason: str,
                        actor: Principal = SYSTEM, correlation_id: str | None = None,
                        break_glass: bool = False, payload: dict | None = None, by_check: bool = False) -> dict:
    """Move an instance to `target` if the move is legal (`by_check`: a health check asks, rules.CHECK_ONLY);
    appends the lifecycle event (and an audit row when a person caused it). Locks the instance row, so
    concurrent workers serialize here."""
    before = get_instance(conn, instance_id, lock=True)
    rules.check_transition(rules.INSTANCE_TRANSITIONS, "instance", before["status"], target, by_check=by_check)
    after = conn.execute(
        """UPDATE app_instances SET status = %s, status_reason = %s, updated_at = now()
            WHERE id = %s RETURNING *""",
        (target, reason, instance_id),
    ).fetchone()
    audit.append_event(conn, after, rules.INSTANCE_EVENT[target],
                       {"from": before["status"], "to": target, "reason": reason, **(payload or {})},
                       correlation_id=correlation_id)
    if actor.kind != "system":
        audit.record(conn, actor, "apps.instance.transition", "app_instance", instance_id,
                     before={"status": before["status"]}, after={"status": target}, reason=reason,
                     break_glass=break_glass, context=audit.instance_context(after),
                     correlation_id=correlation_id)
    return after


def check_health_soon(conn: psycopg.Connection, instance_id: UUID) -> None:
    """Make the instance's next health check due at once (health/): after a deploy, a refresh, a run that
    failed on some hosts."""
    conn.execute("UPDATE app_instances SET health_due_at = now() WHERE id = %s", (instance_id,))


def get_member(conn: psycopg.Connection, instance_id: UUID, member_id: UUID) -> dict:
    row = conn.execute(MEMBER_SELECT + " WHERE m.id = %s AND m.instance_id = %s", (member_id, instance_id)).fetchone()
    if row is None:
        raise not_found("member", member_id)
    return row


def list_members(conn: psycopg.Connection, instance_id: UUID, *, role: str | None = None,
                 status: str | None = None, after: int | None = None, limit: int = 100):
    rows = conn.execute(
        MEMBER_SELECT + """
         WHERE m.instance_id = %(iid)s AND (%(role)s::text IS NULL OR m.role = %(role)s)
           AND (%(status)s::text IS NULL OR m.status = %(status)s) AND m.seq > %(after)s
         ORDER BY m.seq LIMIT %(limit)s""",
        {"iid": instance_id, "role": role, "status": status, "after": after or 0, "limit": limit + 1},
    ).fetchall()
    return page_of(rows, limit)


def instance_inventory(conn: psycopg.Connection, instance: dict) -> dict:
    """The inventory of the instance's members that are not removed (instances/inventory.py)."""
    version = get_version_by_id(conn, instance["app_version_id"])
    members = conn.execute(MEMBER_SELECT + " WHERE m.instance_id = %s AND m.status <> 'removed' ORDER BY m.seq",
                           (instance["id"],)).fetchall()
    return inventory.build(stored_spec(version), instance["id"], members)


def set_member_status(conn: psycopg.Connection, member_id: UUID, target: str, *, reason: str = "",
                      actor: Principal = SYSTEM, correlation_id: str | None = None,
                      payload: dict | None = None) -> dict:
    """Move a member through its lifecycle (legal moves only) and append the matching timeline event."""
    before = conn.execute("SELECT * FROM app_instance_members WHERE id = %s FOR UPDATE", (member_id,)).fetchone()
    if before is None:
        raise not_found("member", member_id)
    rules.check_transition(rules.MEMBER_TRANSITIONS, "member", before["status"], target)
    instance = get_instance(conn, before["instance_id"], include_deleted=True)
    event = audit.append_event(conn, instance, rules.member_event(before["status"], target),
                               {"member_id": str(member_id), "role": before["role"], "node_name": before["node_name"],
                                "from": before["status"], "to": target, "reason": reason, **(payload or {})},
                               member_id=member_id, correlation_id=correlation_id)
    after = conn.execute(
        """UPDATE app_instance_members SET status = %s, status_reason = %s, last_correlation_id = %s,
               updated_at = now() WHERE id = %s RETURNING *""",
        (target, reason, event["correlation_id"], member_id),
    ).fetchone()
    if actor.kind != "system":
        audit.record(conn, actor, "apps.member.transition", "member", member_id, before={"status": before["status"]},
                     after={"status": target}, reason=reason, context=audit.instance_context(instance),
                     correlation_id=correlation_id)
    return after


def add_member(conn: psycopg.Connection, actor: Principal, instance_id: UUID, role: str, allocation_id: UUID,
               host_name: str | None = None, *, correlation_id: str | None = None) -> dict:
    """Add one pending member for `role` on an allocation host, within the adapter's max, on a host
    no other instance holds, through the same gate as create. The member starts `pending`; a run
    (issue 4) makes it join."""
    instance = get_instance(conn, instance_id, lock=True)
    if instance["status"] in ("stopping", "stopped"):
        raise conflict("instance_not_operable", f"instance is {instance['status']}", status=instance["status"])
    version = get_version_by_id(conn, instance["app_version_id"])
    spec = next((r for r in version["adapter"]["roles"] if r["name"] == role), None)
    if spec is None:
        raise unprocessable("unknown_role", f"role {role!r} is not defined by the app adapter", role=role)
    live = conn.execute(
        """SELECT m.allocation_id, m.host_name, m.node_name, m.role FROM app_instance_members m
            WHERE m.instance_id = %s AND m.status <> 'removed'""", (instance_id,)).fetchall()
    if sum(1 for m in live if m["role"] == role) >= spec["max"]:
        raise conflict("role_at_max", f"role {role} already has its maximum of {spec['max']} members", role=role)
    allocations = get_allocations(conn, [allocation_id] + [m["allocation_id"] for m in live])
    allocation = allocations.get(allocation_id)
    source_project_id = contributing_project(conn, actor, instance, version, allocation, allocation_id)
    allocations_service.lock_hosts(conn)
    busy = {h for _, h in allocations_service.busy_hosts(conn, [allocation_id], instance_id=instance_id,
                                                         shares_hosts=shares_hosts(version))}
    taken = {m["host_name"] for m in live if m["role"] == role and m["allocation_id"] == allocation_id}
    names = [h["name"] for h in allocation["hosts"]]
    if host_name is None:
        exclusive = exclusive_roles(version)
        host_name = next((h for h in names if h not in busy and rules.may_join(role, {
            m["role"] for m in live if m["allocation_id"] == allocation_id and m["host_name"] == h}, exclusive)),
            None)
        if host_name is None:
            raise conflict("no_free_host", f"every host of allocation {allocation['name']} already has a {role}, "
                           "carries another instance, or carries a role that keeps its host to itself")
    elif host_name not in names:
        raise unprocessable("placement.host", f"host {host_name} is not in allocation {allocation['name']}")
    elif host_name in taken:
        raise conflict("host_taken", f"host {host_name} already has a live {role} member")
    if host_name in busy:
        refuse_busy({(allocation_id, host_name)})
    planned = [rules.PlannedMember(m["role"], m["allocation_id"], m["host_name"]) for m in live]
    planned.append(rules.PlannedMember(role, allocation_id, host_name))
    check_binding(conn, instance["tenant_id"], instance["project_id"], version, allocations, planned)
    named = {(m["allocation_id"], m["host_name"]): m["node_name"] for m in live}
    node_name = rules.node_names([(allocation_id, host_name)], {a["id"]: a["seq"] for a in allocations.values()},
                                 named)[(allocation_id, host_name)]
    member = conn.execute(
        """INSERT INTO app_instance_members (instance_id, role, allocation_id, host_name, node_name, source_project_id)
           VALUES (%s, %s, %s, %s, %s, %s) RETURNING *""",
        (instance_id, role, allocation_id, host_name, node_name, source_project_id),
    ).fetchone()
    topology = instance["topology"]
    for r in topology["roles"]:
        if r["name"] == role:
            r["desired_count"] += 1
    conn.execute("UPDATE app_instances SET topology = %s, updated_at = now() WHERE id = %s",
                 (Jsonb(topology), instance_id))
    contributed = {"source_project_id": str(source_project_id)} if source_project_id else {}
    audit.append_event(conn, instance, "member_add_requested",
                       {"member_id": str(member["id"]), "role": role, "node_name": node_name,
                        "allocation_id": str(allocation_id)} | contributed, member_id=member["id"],
                       correlation_id=correlation_id)
    audit.record(conn, actor, "apps.member.add", "member", member["id"],
                 after={"role": role, "host_name": host_name} | contributed,
                 context=audit.instance_context(instance), correlation_id=correlation_id)
    return member


def contributing_project(conn: psycopg.Connection, actor: Principal, instance: dict, version: dict,
                         allocation: dict | None, allocation_id: UUID) -> UUID | None:
    """None for an allocation of the instance's own project. On a tenant-shared runtime, an allocation of another
    attached project makes a contributed member: chosen by a tenant admin, for a project entitled to the app; that
    project keeps the capacity and is charged for it (docs/tenant-shared.md). Anything else is refused."""
    if allocation is not None and allocation["project_id"] == instance["project_id"]:
        return None
    attached = allocation is not None and instance["control_plane_scope"] == "tenant" and conn.execute(
        """SELECT 1 FROM instance_attachments WHERE instance_id = %s AND project_id = %s AND status = 'attached'""",
        (instance["id"], allocation["project_id"])).fetchone()
    if not attached:
        raise unprocessable("allocation.unknown", f"allocation {allocation_id} is not held by this project"
                            + (" or by a project attached to this shared runtime" if instance["control_plane_scope"]
                               == "tenant" else ""))
    actor.require("apps.shared_runtime.manage", tenant_id=instance["tenant_id"])
    if not is_entitled(conn, allocation["project_id"], version["app_slug"]):
        raise ApiError(403, "not_entitled", f"the contributing project is not entitled to app {version['app_slug']}",
                       {"app_slug": version["app_slug"], "project_id": str(allocation["project_id"])})
    return allocation["project_id"]


MAX_LABELS = 32


def update_instance(conn: psycopg.Connection, actor: Principal, instance_id: UUID, changes: dict) -> dict:
    """Set the fields given (labels, canary); the others stay. Labels merge as RFC 7396 says: a key
    with a value is set, a key with null is removed, keys not named stay."""
    before = get_instance(conn, instance_id, lock=True)
    if "attachable_project_ids" in changes:
        changes["attachable_project_ids"] = check_allowlist(conn, actor, before, changes["attachable_project_ids"])
    after = {"labels": before["labels"], "canary": before["canary"],
             "attachable_project_ids": before["attachable_project_ids"]} | changes
    if "labels" in changes:
        labels = dict(before["labels"])
        for key, value in changes["labels"].items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        if len(labels) > MAX_LABELS:
            raise unprocessable("validation_error", f"an instance holds at most {MAX_LABELS} labels; "
                                f"this merge would leave {len(labels)}", max_labels=MAX_LABELS)
        after["labels"] = labels
    conn.execute("""UPDATE app_instances SET labels = %s, canary = %s, attachable_project_ids = %s, updated_at = now()
                     WHERE id = %s""", (Jsonb(after["labels"]), after["canary"], after["attachable_project_ids"],
                                        instance_id))
    audit.record(conn, actor, "apps.instance.update", "app_instance", instance_id,
                 before={k: before[k] for k in changes}, after=changes, context=audit.instance_context(before))
    return get_instance_view(conn, instance_id)


def delete_instance(conn: psycopg.Connection, actor: Principal, instance_id: UUID) -> None:
    """Delete the record of an instance with nothing running: never started (created) or torn down
    (stopped). Anything else needs a decommission first, so no runtime is orphaned."""
    instance = get_instance(conn, instance_id, lock=True)
    # The instance lock also serializes accepting operations, so none can be queued after this check.
    open_op = conn.execute("""SELECT id, kind, status FROM operations WHERE instance_id = %s
                                 AND status IN ('queued', 'running') ORDER BY seq LIMIT 1""", (instance_id,)).fetchone()
    if open_op:
        raise conflict("operation_open", f"a {open_op['kind']} operation is {open_op['status']} on this instance; "
                       "cancel it (or let it finish) first", operation_id=str(open_op["id"]), kind=open_op["kind"],
                       status=open_op["status"])
    if instance["status"] not in rules.DELETABLE_STATUSES:
        raise conflict("instance_not_deletable",
                       f"instance is {instance['status']}; decommission it first (only created or stopped "
                       "instances can be deleted)", status=instance["status"])
    for m in conn.execute("SELECT id, status FROM app_instance_members WHERE instance_id = %s AND status <> 'removed'",
                          (instance_id,)).fetchall():
        if m["status"] in ("pending", "failed"):
            set_member_status(conn, m["id"], "removed", reason="instance deleted")
        else:
            raise conflict("member_still_live", f"member {m['id']} is {m['status']}; remove it first")
    conn.execute("UPDATE app_instances SET deleted_at = now(), updated_at = now() WHERE id = %s", (instance_id,))
    audit.append_event(conn, instance, "apps.instance.deleted", {"status": instance["status"]})
    audit.record(conn, actor, "apps.instance.delete", "app_instance", instance_id,
                 before={"status": instance["status"]}, after={"deleted": True},
                 context=audit.instance_context(instance))

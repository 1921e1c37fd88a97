"""Attaching projects to a tenant-shared runtime, detaching them, and the submit grants that let one principal
submit into another attached project's account (docs/tenant-shared.md). Each change is a tenant admin's
(`apps.shared_runtime.manage`), audited, an event on the runtime's timeline, and queues the access_sync that makes
the runtime's accounts and associations follow: the API enforces the change at once, the scheduler from that run
on."""

from __future__ import annotations

from uuid import UUID

import psycopg

from ..access import service as access
from ..audit import service as audit
from ..config import OperationSettings
from ..db import Database
from ..errors import ApiError, conflict, not_found, unprocessable
from ..iam.auth import Principal
from ..instances import service as instances
from ..policy.service import is_entitled
from ..scheduler import gateway
from . import scope

MANAGE = "apps.shared_runtime.manage"

_ATTACHMENT_SELECT = """
SELECT a.id, a.instance_id, a.project_id, p.name AS project_name, a.owner, a.status, a.reason, a.created_by,
       a.created_at, a.detached_by, a.detached_at, i.name AS instance_name, i.app_slug, i.environment
  FROM instance_attachments a JOIN projects p ON p.id = a.project_id JOIN app_instances i ON i.id = a.instance_id
"""


def _shared_instance(conn: psycopg.Connection, caller: Principal, instance_id: UUID, *, manage: bool) -> dict:
    instance = instances.get_instance(conn, instance_id)
    if manage:
        if not caller.sees(instance["tenant_id"], instance["project_id"]):
            caller.require(MANAGE, tenant_id=instance["tenant_id"], project_id=instance["project_id"])
        caller.require(MANAGE, tenant_id=instance["tenant_id"])
    else:
        caller.require("apps.instance.read", tenant_id=instance["tenant_id"], project_id=instance["project_id"])
    if not scope.is_shared(instance):
        raise conflict("not_shared", "this instance serves its own project only (control_plane_scope project); "
                       "projects attach to a tenant-shared runtime",
                       control_plane_scope=instance["control_plane_scope"])
    return instance


def _view(conn: psycopg.Connection, attachment_id: UUID) -> dict:
    row = conn.execute(_ATTACHMENT_SELECT + " WHERE a.id = %s", (attachment_id,)).fetchone()
    return row | {"account": access.account_name({"name": row["project_name"], "id": row["project_id"]})}


def _payload(row: dict) -> dict:
    return {"attachment_id": str(row["id"]), "project_id": str(row["project_id"]), "project": row["project_name"],
            "account": row["account"], "reason": row["reason"]}


def list_attachments(conn: psycopg.Connection, caller: Principal, instance_id: UUID) -> list[dict]:
    instance = _shared_instance(conn, caller, instance_id, manage=False)
    rows = conn.execute(_ATTACHMENT_SELECT + " WHERE a.instance_id = %s AND a.status = 'attached' ORDER BY a.seq",
                        (instance["id"],)).fetchall()
    return [_view(conn, r["id"]) for r in rows]


def get_attachment(conn: psycopg.Connection, caller: Principal, instance_id: UUID, project_id: UUID) -> dict:
    instance = _shared_instance(conn, caller, instance_id, manage=False)
    row = conn.execute(_ATTACHMENT_SELECT + """ WHERE a.instance_id = %s AND a.project_id = %s
                                                  ORDER BY a.seq DESC LIMIT 1""",
                       (instance["id"], project_id)).fetchone()
    if row is None:
        raise not_found("attachment", project_id)
    return _view(conn, row["id"])


def project_attachments(conn: psycopg.Connection, caller: Principal, project: dict) -> list[dict]:
    """The shared runtimes the project is attached to: how its people and service accounts find the instance
    whose jobs routes they use, and the account their jobs are charged to there."""
    caller.require("apps.instance.read", tenant_id=project["tenant_id"], project_id=project["id"])
    rows = conn.execute(_ATTACHMENT_SELECT + """ WHERE a.project_id = %s AND a.status = 'attached'
                                                   AND i.deleted_at IS NULL ORDER BY a.seq""",
                        (project["id"],)).fetchall()
    return [_view(conn, r["id"]) for r in rows]


def attach(conn: psycopg.Connection, settings: OperationSettings, caller: Principal, instance_id: UUID,
           project_id: UUID, reason: str) -> dict:
    """Attach a project of the tenant, from the runtime's allowlist and entitled to its app: its account and its
    principals' associations come with the access_sync this queues."""
    instance = _shared_instance(conn, caller, instance_id, manage=True)
    instances.get_instance(conn, instance_id, lock=True)  # one attach or detach of a project at a time
    project = conn.execute("SELECT * FROM projects WHERE id = %s AND tenant_id = %s",
                           (project_id, instance["tenant_id"])).fetchone()
    if project is None:
        raise not_found("project", project_id)
    if project_id not in instance["attachable_project_ids"]:
        raise ApiError(403, "project_not_allowlisted", f"project {project['name']} is not on this runtime's allowlist "
                       "of attachable projects", {"project_id": str(project_id)})
    if not is_entitled(conn, project_id, instance["app_slug"]):
        raise ApiError(403, "not_entitled", f"project {project['name']} is not entitled to app {instance['app_slug']}",
                       {"app_slug": instance["app_slug"], "project_id": str(project_id)})
    if conn.execute("""SELECT 1 FROM instance_attachments WHERE instance_id = %s AND project_id = %s
                         AND status = 'attached'""", (instance_id, project_id)).fetchone():
        raise conflict("already_attached", f"project {project['name']} is already attached to this runtime",
                       project_id=str(project_id))
    row = conn.execute(
        """INSERT INTO instance_attachments (instance_id, tenant_id, project_id, status, reason, created_by)
           VALUES (%s, %s, %s, 'attached', %s, %s) RETURNING id""",
        (instance_id, instance["tenant_id"], project_id, reason, caller.id)).fetchone()
    view = _view(conn, row["id"])
    audit.append_event(conn, instance, "apps.instance.project_attached", _payload(view))
    audit.record(conn, caller, "apps.shared_runtime.attach", "instance_attachment", row["id"], after=_payload(view),
                 reason=reason, context=_context(instance, project_id))
    view["operation_ids"] = access.queue_sync(conn, settings, caller, instance_id=instance_id,
                                              reason=f"project {project['name']} attached")
    return view


def detach(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID, project_id: UUID,
           reason: str) -> dict:
    """Detach a project: refused while a job would lose its association with it (a job of its account, or one
    that its principals run in another account through a grant; the runtime is asked first, outside any
    transaction). Then the grants into its account, and those of principals it alone served, are revoked; its
    contributed members are removed (each with a member_remove, which drains it); and the access_sync this queues
    removes its account and its principals' associations. The owner project stays attached for as long as the
    runtime lives."""
    with db.transaction() as conn:
        instance = _changeable(conn, caller, instance_id)
        row = _live_attachment(conn, instance_id, project_id)
        if row["owner"]:
            raise conflict("owner_attachment", "the runtime's own project stays attached; decommission the runtime "
                           "to end it", project_id=str(project_id))
        busy = conn.execute(
            """SELECT o.id, o.kind, o.status FROM operations o
                WHERE o.instance_id = %s AND o.status IN ('queued', 'running')
                  AND o.member_ids && ARRAY(SELECT id FROM app_instance_members
                                             WHERE instance_id = %s AND source_project_id = %s)
                ORDER BY o.seq LIMIT 1""",
            (instance_id, instance_id, project_id)).fetchone()
        if busy:
            raise conflict("operation_open", f"a {busy['kind']} of one of the project's members is {busy['status']}; "
                           "let it finish or cancel it, then detach", operation_id=str(busy["id"]),
                           kind=busy["kind"], status=busy["status"])
        lost = _lost_associations(conn, instance, lambda: _end_attachment(conn, caller, row))
        gw = _serving_gateway(conn, settings, instance)
    _refuse_jobs(gw, lost, "attachment_has_jobs", f"detaching project {row['project_name']}")
    with db.transaction() as conn:
        instance = instances.get_instance(conn, instance_id, lock=True)
        _end_attachment(conn, caller, row)
        view = _view(conn, row["id"])
        revoked = _revoke_unserved(conn, caller, instance, project_id, reason=f"project {row['project_name']} detached")
        payload = _payload(view) | {"grants_revoked": revoked}
        audit.append_event(conn, instance, "apps.instance.project_detached", payload | {"detach_reason": reason})
        audit.record(conn, caller, "apps.shared_runtime.detach", "instance_attachment", row["id"],
                     before={"status": "attached"}, after=payload | {"status": "detached"}, reason=reason,
                     context=_context(instance, project_id))
        view["operation_ids"] = _remove_contributed(conn, settings, caller, instance, project_id)
        view["operation_ids"] += access.queue_sync(conn, settings, caller, instance_id=instance_id,
                                                   reason=f"project {row['project_name']} detached")
    return view


# A change that takes associations away is made where the runtime serves (its jobs are checked first and the
# access_sync follows at once), or where it runs nothing (created: its deploy applies the map; stopped).
CHANGEABLE = ("created", "running", "degraded", "stopped")


def _changeable(conn: psycopg.Connection, caller: Principal, instance_id: UUID) -> dict:
    instance = _shared_instance(conn, caller, instance_id, manage=True)
    if instance["status"] not in CHANGEABLE:
        raise conflict("instance_not_operable", f"the runtime is {instance['status']}: its jobs cannot be checked "
                       "and its accounts would keep this change until its next run; retry once it runs again",
                       status=instance["status"])
    return instance


def _live_attachment(conn: psycopg.Connection, instance_id: UUID, project_id: UUID) -> dict:
    row = conn.execute(_ATTACHMENT_SELECT + " WHERE a.instance_id = %s AND a.project_id = %s AND a.status = 'attached'",
                       (instance_id, project_id)).fetchone()
    if row is None:
        raise not_found("attachment", project_id)
    return row


def _end_attachment(conn: psycopg.Connection, caller: Principal, row: dict) -> None:
    ended = conn.execute("""UPDATE instance_attachments SET status = 'detached', detached_by = %s, detached_at = now()
                             WHERE id = %s AND status = 'attached' RETURNING id""", (caller.id, row["id"])).fetchone()
    if ended is None:
        raise conflict("already_detached", f"project {row['project_name']} was detached meanwhile")


def _associations(conn: psycopg.Connection, instance: dict) -> set[tuple[str, str]]:
    return {(account, i["name"]) for i in access.access_map(conn, instance)["identities"] for account in i["accounts"]}


def _lost_associations(conn: psycopg.Connection, instance: dict, change) -> set[tuple[str, str]]:
    """The (account, user) associations the runtime would lose with `change`, made in a savepoint and undone."""
    before = _associations(conn, instance)
    with conn.transaction() as savepoint:
        change()
        after = _associations(conn, instance)
        raise psycopg.Rollback(savepoint)
    return before - after


def _serving_gateway(conn: psycopg.Connection, settings: OperationSettings, instance: dict) -> gateway.Gateway | None:
    """The gateway of a runtime that runs jobs; None for one that does not (created, stopped)."""
    return gateway.for_instance(conn, settings, instance) if instance["status"] in ("running", "degraded") else None


def _refuse_jobs(gw: gateway.Gateway | None, lost: set[tuple[str, str]], code: str, change: str) -> None:
    """409 when a queued or running job runs under an association the change takes away: the runtime would cancel
    it (slurm_accounts cancels an association's jobs before removing it)."""
    if gw is None or not lost:
        return
    claims = {"accounts": sorted({account for account, _ in lost}), "node_operate": False}
    params: dict = {"state": "pending,running", "limit": 500}
    active = []
    while True:
        page = gw.call("GET", "/v1/jobs", claims, params=params)
        active += [j for j in page.get("items") or [] if (j.get("account"), j.get("user")) in lost]
        if not page.get("next"):
            break
        params["before"] = page["next"]
    if active:
        accounts = sorted({j["account"] for j in active})
        raise conflict(code, f"{change} would end {len(active)} queued or running job(s) ({', '.join(accounts)}); "
                       "cancel them or let them end, then retry", jobs=len(active),
                       job_ids=[str(j.get("id")) for j in active[:20]], accounts=accounts)


def _context(instance: dict, project_id: UUID) -> dict:
    """An attachment's or a grant's audit rows belong to the project it concerns (the one attached, the one whose
    account a grant opens); the runtime's own project reads the change on its timeline."""
    return audit.instance_context(instance) | {"project_id": project_id}


def _revoke_unserved(conn: psycopg.Connection, caller: Principal, instance: dict, project_id: UUID, *,
                     reason: str) -> list[str]:
    """Revoke the live grants into the project's account, and those of principals the runtime no longer serves:
    they would otherwise come back with a later attach or binding."""
    served = {i["principal"] for i in access.access_map(conn, instance)["identities"]}
    revoked = []
    for grant_row in conn.execute("SELECT * FROM submit_grants WHERE instance_id = %s AND revoked_at IS NULL",
                                  (instance["id"],)).fetchall():
        if grant_row["target_project_id"] == project_id or \
                f"{grant_row['principal_kind']}:{grant_row['principal_id']}" not in served:
            _revoke_row(conn, caller, instance, grant_row["id"], reason)
            revoked.append(str(grant_row["id"]))
    return revoked


def _remove_contributed(conn: psycopg.Connection, settings: OperationSettings, caller: Principal, instance: dict,
                        project_id: UUID) -> list[UUID]:
    """A member_remove for each live member the project contributed; one never deployed is simply removed."""
    from ..operations import service as operations  # operations imports this module's callers

    queued = []
    for m in conn.execute("""SELECT id, status FROM app_instance_members WHERE instance_id = %s
                               AND source_project_id = %s AND status <> 'removed' ORDER BY seq""",
                          (instance["id"], project_id)).fetchall():
        if m["status"] == "pending":
            instances.set_member_status(conn, m["id"], "removed", reason="its project was detached", actor=caller)
            continue
        queued.append(operations.accept(conn, settings, caller, instance["id"], "member_remove",
                                        {"reason": "its project was detached"}, member_id=m["id"])["id"])
    return queued


def billing_split(conn: psycopg.Connection, caller: Principal, instance_id: UUID) -> dict:
    """Who is charged for each member there is (pending ones too: the split is visible before a deploy) and for
    jobs of each account, by the metering rule itself (metering/attribution.py)."""
    from ..metering import attribution

    instance = instances.get_instance(conn, instance_id)
    caller.require("apps.instance.read", tenant_id=instance["tenant_id"], project_id=instance["project_id"])
    names = {p["id"]: p["name"] for p in scope.attached_projects(conn, instance, with_detached=True)}
    members = []
    for m in conn.execute("""SELECT id, role, node_name, host_name, allocation_id, status, source_project_id
                               FROM app_instance_members WHERE instance_id = %s AND status <> 'removed' ORDER BY seq""",
                          (instance_id,)).fetchall():
        charge = attribution.charged_to(instance, m)
        members.append({"member_id": m["id"], "role": m["role"], "node_name": m["node_name"], "status": m["status"],
                        "allocation_id": m["allocation_id"], "project_id": charge.project_id,
                        "project_name": names.get(charge.project_id), "charged_as": charge.charged_as})
    by_account = {access.account_name(p): p for p in scope.attached_projects(conn, instance)}
    accounts = []
    for account, project in by_account.items():
        charge = attribution.job_charged_to(instance, account, {a: p["id"] for a, p in by_account.items()})
        accounts.append({"account": account, "project_id": charge.project_id, "project_name": project["name"],
                         "charged_as": charge.charged_as})
    return {"instance_id": instance_id, "control_plane_scope": instance["control_plane_scope"],
            "owner_project_id": instance["project_id"], "members": members, "job_accounts": accounts}


_GRANT_SELECT = """
SELECT g.*, p.name AS target_project_name, coalesce(u.email, s.name) AS principal_name
  FROM submit_grants g JOIN projects p ON p.id = g.target_project_id
  LEFT JOIN users u ON g.principal_kind = 'user' AND u.id = g.principal_id
  LEFT JOIN service_accounts s ON g.principal_kind = 'service_account' AND s.id = g.principal_id
"""


def _grant_view(conn: psycopg.Connection, grant_id: UUID) -> dict:
    row = conn.execute(_GRANT_SELECT + " WHERE g.id = %s", (grant_id,)).fetchone()
    return row | {"account": access.account_name({"name": row["target_project_name"], "id": row["target_project_id"]})}


def _grant_payload(row: dict) -> dict:
    return {"grant_id": str(row["id"]), "principal_kind": row["principal_kind"],
            "principal_id": str(row["principal_id"]), "principal": row["principal_name"],
            "target_project_id": str(row["target_project_id"]),
            "account": row["account"], "reason": row["reason"]}


def list_grants(conn: psycopg.Connection, caller: Principal, instance_id: UUID) -> list[dict]:
    instance = _shared_instance(conn, caller, instance_id, manage=False)
    rows = conn.execute(_GRANT_SELECT + " WHERE g.instance_id = %s AND g.revoked_at IS NULL ORDER BY g.seq",
                        (instance["id"],)).fetchall()
    return [_grant_view(conn, r["id"]) for r in rows]


def get_grant(conn: psycopg.Connection, caller: Principal, instance_id: UUID, grant_id: UUID) -> dict:
    instance = _shared_instance(conn, caller, instance_id, manage=False)
    row = conn.execute("SELECT id FROM submit_grants WHERE id = %s AND instance_id = %s",
                       (grant_id, instance["id"])).fetchone()
    if row is None:
        raise not_found("submit_grant", grant_id)
    return _grant_view(conn, grant_id)


def grant(conn: psycopg.Connection, settings: OperationSettings, caller: Principal, instance_id: UUID, *,
          principal_kind: str, principal_id: UUID, target_project_id: UUID, reason: str) -> dict:
    """Let one principal that uses the runtime through its own project submit into another attached project's
    account: the one association this grant names is added with the access_sync it queues."""
    instance = _shared_instance(conn, caller, instance_id, manage=True)
    projects = {p["id"]: p for p in scope.attached_projects(conn, instance)}
    if target_project_id not in projects:
        raise unprocessable("project_not_attached", "a grant names an attached project's account",
                            project_id=str(target_project_id))
    table = "users" if principal_kind == "user" else "service_accounts"
    principal = conn.execute(f"SELECT * FROM {table} WHERE id = %s AND tenant_id = %s AND NOT disabled",  # noqa: S608
                             (principal_id, instance["tenant_id"])).fetchone()
    if principal is None:
        raise not_found(principal_kind, principal_id)
    own = access.accounts_of(conn, instance, principal_kind, principal_id)
    if not own:
        raise unprocessable("principal_not_served", "the principal may submit jobs in no project attached to this "
                            "runtime; a grant extends a principal's use of the runtime, it does not start it",
                            principal_id=str(principal_id))
    account = access.account_name(projects[target_project_id])
    if account in own:
        raise conflict("already_allowed", f"the principal may already submit into {account}", account=account)
    row = conn.execute(
        """INSERT INTO submit_grants (instance_id, principal_kind, principal_id, target_project_id, reason, created_by)
           VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""",
        (instance_id, principal_kind, principal_id, target_project_id, reason, caller.id)).fetchone()
    view = _grant_view(conn, row["id"])
    audit.append_event(conn, instance, "apps.instance.submit_granted", _grant_payload(view))
    audit.record(conn, caller, "apps.shared_runtime.grant", "submit_grant", row["id"], after=_grant_payload(view),
                 reason=reason, context=_context(instance, target_project_id))
    view["operation_ids"] = access.queue_sync(conn, settings, caller, instance_id=instance_id,
                                              reason=f"submit grant into {account}")
    return view


def revoke(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID, grant_id: UUID) -> dict:
    """Revoke a grant: refused while a job runs under the association it adds (the runtime would cancel it)."""
    with db.transaction() as conn:
        instance = _changeable(conn, caller, instance_id)
        live = conn.execute("SELECT id FROM submit_grants WHERE id = %s AND instance_id = %s AND revoked_at IS NULL",
                            (grant_id, instance_id)).fetchone()
        if live is None:
            raise not_found("submit_grant", grant_id)
        lost = _lost_associations(conn, instance, lambda: conn.execute(
            "UPDATE submit_grants SET revoked_at = now() WHERE id = %s", (grant_id,)))
        gw = _serving_gateway(conn, settings, instance)
    _refuse_jobs(gw, lost, "grant_has_jobs", "revoking this grant")
    with db.transaction() as conn:
        instance = instances.get_instance(conn, instance_id, lock=True)
        _revoke_row(conn, caller, instance, grant_id, "revoked")
        view = _grant_view(conn, grant_id)
        view["operation_ids"] = access.queue_sync(conn, settings, caller, instance_id=instance_id,
                                                  reason=f"submit grant into {view['account']} revoked")
    return view


def _revoke_row(conn: psycopg.Connection, caller: Principal, instance: dict, grant_id: UUID, reason: str) -> None:
    row = conn.execute("""UPDATE submit_grants SET revoked_by = %s, revoked_at = now()
                           WHERE id = %s AND revoked_at IS NULL RETURNING id""", (caller.id, grant_id)).fetchone()
    if row is None:
        raise conflict("already_revoked", "the grant was revoked meanwhile", grant_id=str(grant_id))
    view = _grant_view(conn, grant_id)
    audit.append_event(conn, instance, "apps.instance.submit_revoked", _grant_payload(view))
    audit.record(conn, caller, "apps.shared_runtime.revoke", "submit_grant", grant_id, before=_grant_payload(view),
                 after={"revoked": True}, reason=reason, context=_context(instance, view["target_project_id"]))

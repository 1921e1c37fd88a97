"""Jobs and nodes of an instance, through its scheduler gateway (gateway.py, docs/scheduler.md).

Every call acts as the caller's runtime identity (access/service.py) and claims only the caller's project's
account: the gateway shows and cancels only jobs of that account, and runs a submitted job as that identity,
so the scheduler itself (Slurm's associations) refuses what the API refuses. The API checks the permission
keys and the account first; the database transaction ends before the gateway is called, so a slow runtime
holds no row. Submissions, cancels and node operations are audited with the job or node they touched."""

from __future__ import annotations

import base64
import binascii
from uuid import UUID

import psycopg

from ..access import service as access
from ..audit import service as audit
from ..config import OperationSettings
from ..db import Database
from ..errors import ApiError, conflict, not_found, unprocessable
from ..iam.auth import Principal
from ..instances import service as instances
from ..sharing import scope
from . import gateway
from .schemas import JobSubmit

MAX_PAGE = 500
NODE_OPERATE = "scheduler.node.operate"


def _open(conn: psycopg.Connection, settings: OperationSettings, caller: Principal, instance_id: UUID,
          permission: str, *, as_identity: bool = False) -> tuple[dict, gateway.Gateway, dict[str, UUID], dict]:
    """The instance (after the permission check), its gateway, the accounts the caller may use there (each with
    its project: its own project's, or on a tenant-shared runtime those of the attached projects in which it
    holds `permission`) and the caller's claims: `sub`, the caller's runtime identity, only when the call acts as
    it (a submit, a list of one's own jobs), so a reader gets no identity it does not need. Operating the shared
    nodes of a runtime needs the key in the instance's own project."""
    instance = instances.get_instance(conn, instance_id)
    if permission == NODE_OPERATE:
        caller.require(permission, tenant_id=instance["tenant_id"], project_id=instance["project_id"])
        projects = scope.attached_projects(conn, instance)[:1]
    else:
        projects = scope.caller_projects(conn, instance, caller, permission)
    gw = gateway.for_instance(conn, settings, instance)
    accounts = {access.account_name(p): p["id"] for p in projects}
    claims = {"accounts": list(accounts),
              "node_operate": caller.permits(NODE_OPERATE, tenant_id=instance["tenant_id"],
                                             project_id=instance["project_id"])}
    if as_identity:
        claims["sub"] = access.identity(conn, caller.kind, caller.id)["name"]
    return instance, gw, accounts, claims


def _submit_account(conn: psycopg.Connection, instance: dict, caller: Principal, mine: dict[str, UUID],
                    requested: str | None) -> tuple[str, UUID]:
    """The account a submit is charged to: the one named, if it is the caller's own project's or a live submit
    grant names it (cross-project submission is denied otherwise); unnamed, the caller's only account."""
    if requested is None:
        if len(mine) > 1:
            raise unprocessable("account_required", f"you may submit into several accounts here "
                                f"({', '.join(mine)}); name one", accounts=list(mine))
        return next(iter(mine.items()))
    if requested in mine:
        return requested, mine[requested]
    served = {access.account_name(p): p for p in scope.attached_projects(conn, instance)}
    target = served.get(requested)
    if target is None:
        raise ApiError(403, "account_not_allowed", f"jobs here are charged to your project's account "
                       f"({', '.join(mine)}); you may not submit into {requested}", {"accounts": list(mine)})
    if requested in access.accounts_of(conn, instance, caller.kind, caller.id):  # a live submit grant names it
        return requested, target["id"]
    raise ApiError(403, "cross_project_denied", f"account {requested} is project {target['name']}'s; submitting "
                   "into another project's account needs a submit grant from a tenant admin",
                   {"account": requested, "project_id": str(target["id"])})


def _as_jobs(conn: psycopg.Connection, accounts: dict[str, UUID], raw: list[dict]) -> list[dict]:
    """The gateway's jobs of the caller's accounts (a second check after the gateway's own: no other account's
    job is ever shown), with their platform owner and project."""
    raw = [j for j in raw if j.get("account") in accounts]
    users = sorted({j.get("user") or "" for j in raw})
    owners = {r["name"]: {"kind": r["principal_kind"], "id": r["principal_id"]} for r in conn.execute(
        "SELECT name, principal_kind, principal_id FROM runtime_identities WHERE name = ANY(%s)", (users,))}
    return [j | {"owner": owners.get(j.get("user")), "runtime_user": j.get("user") or "",
                 "project_id": accounts[j["account"]]} for j in raw]


def _one_job(conn: psycopg.Connection, accounts: dict[str, UUID], job: dict, job_id: str) -> dict:
    shown = _as_jobs(conn, accounts, [job])
    if not shown:
        raise not_found("job", job_id)
    return shown[0]


def _job_context(instance: dict, project_id: UUID) -> dict:
    """A job's audit rows belong to the project charged for it: on a shared runtime, not the owner's."""
    return audit.instance_context(instance) | {"project_id": project_id}


def _job_ref(instance: dict, job_id: str) -> str:
    return f"{instance['id']}/{job_id}"


def submit(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID, body: JobSubmit) -> dict:
    with db.transaction() as conn:
        instance, gw, mine, claims = _open(conn, settings, caller, instance_id, "scheduler.queue.submit",
                                           as_identity=True)
        account, project_id = _submit_account(conn, instance, caller, mine, body.account)
    claims["accounts"] = [account]
    # Only what the caller set: a default here would override the script's own #SBATCH lines.
    request = body.model_dump(mode="json", exclude_unset=True) | {"account": account}
    job = gw.call("POST", "/v1/jobs", claims, json=request)
    with db.transaction() as conn:
        shown = _one_job(conn, {account: project_id}, job, str(job.get("id")))
        audit.record(conn, caller, "scheduler.job.submit", "job", _job_ref(instance, job["id"]),
                     after={"id": job["id"], "name": job.get("name"), "account": account,
                            "runtime_user": claims["sub"], "resources": job.get("resources")},
                     context=_job_context(instance, project_id))
    return shown


def list_jobs(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID, *,
              state: str | None, mine: bool, cursor: str | None, limit: int) -> dict:
    with db.transaction() as conn:
        _, gw, accounts, claims = _open(conn, settings, caller, instance_id, "scheduler.queue.read",
                                        as_identity=mine)
    params = {"limit": min(limit, MAX_PAGE)} | ({"state": state} if state else {})
    params |= ({"user": claims["sub"]} if mine else {}) | ({"before": _decode(cursor)} if cursor else {})
    page = gw.call("GET", "/v1/jobs", claims, params=params)
    with db.transaction() as conn:
        items = _as_jobs(conn, accounts, page.get("items") or [])
    nxt = page.get("next")
    return {"items": items, "next_cursor": base64.urlsafe_b64encode(f"j:{nxt}".encode()).decode() if nxt else None}


def _decode(cursor: str) -> str:
    try:
        kind, _, value = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        kind, value = "", ""
    if kind != "j" or not value:
        raise ApiError(400, "invalid_cursor", "the cursor is not one this list returned")
    return value


def get_job(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID, job_id: str) -> dict:
    with db.transaction() as conn:
        _, gw, accounts, claims = _open(conn, settings, caller, instance_id, "scheduler.queue.read")
    job = gw.call("GET", f"/v1/jobs/{job_id}", claims)
    with db.transaction() as conn:
        return _one_job(conn, accounts, job, job_id)


def cancel_job(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID, job_id: str) -> dict:
    with db.transaction() as conn:
        instance, gw, accounts, claims = _open(conn, settings, caller, instance_id, "scheduler.queue.cancel")
    job = gw.call("DELETE", f"/v1/jobs/{job_id}", claims)
    with db.transaction() as conn:
        shown = _one_job(conn, accounts, job, job_id)
        audit.record(conn, caller, "scheduler.job.cancel", "job", _job_ref(instance, job_id),
                     after={"id": job_id, "state": job.get("state"), "runtime_user": job.get("user")},
                     context=_job_context(instance, shown["project_id"]))
    return shown


def list_nodes(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID) -> dict:
    with db.transaction() as conn:
        _, gw, _, claims = _open(conn, settings, caller, instance_id, "scheduler.node.read")
    return {"items": gw.call("GET", "/v1/nodes", claims).get("items") or []}


def operate_node(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID, name: str,
                 action: str, request: dict) -> dict:
    """drain, resume or features: the node as it is afterwards; audited, and an event on the timeline."""
    with db.transaction() as conn:
        instance, gw, _, claims = _open(conn, settings, caller, instance_id, NODE_OPERATE)
        if action not in gw.spec.node_operations:
            raise conflict("node_operation_not_supported", f"this instance's runtime has no node operation {action} "
                           f"(it has: {', '.join(gw.spec.node_operations) or 'none'})", action=action)
    node = gw.call("POST", f"/v1/nodes/{name}", claims, json={"action": action} | request)
    with db.transaction() as conn:
        payload = {"node": name, "action": action, "state": node.get("state"), "reason": node.get("reason"),
                   "features": node.get("features"), "by": {"kind": caller.kind, "id": str(caller.id)}}
        audit.record(conn, caller, f"scheduler.node.{action}", "node", f"{instance['id']}/{name}", after=payload,
                     context=audit.instance_context(instance))
        audit.append_event(conn, instance, f"scheduler.node.{action}", payload)
    return node

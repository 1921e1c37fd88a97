"""Runtime access (docs/scheduler.md): who may use an instance's runtime, as which runtime identity, charged to
which account, and who may log in with which SSH keys. The platform computes this access map from its own
records (role bindings, service accounts, users' keys) for every run of an app that declares `access`, and
queues an access_sync run on each affected instance when a record changes, so the runtime follows the
platform: associations in the scheduler enforce what the API enforces.

A principal's runtime identity (Unix user name and uid) is created the first time it is needed and kept for
good, so a uid never changes hands and a job's owner on any cluster names one principal."""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from uuid import UUID

import psycopg

from ..catalog.adapter import AdapterSpec, stored_spec
from ..catalog.service import get_version_by_id
from ..config import OperationSettings
from ..db import Database
from ..errors import ApiError, conflict
from ..iam.auth import Principal
from ..iam.permissions import ROLES
from ..sharing import scope

log = logging.getLogger(__name__)
SUBMIT, LOGIN = "scheduler.queue.submit", "apps.instance.access"
# An access_sync is queued for these instances (one starting queues behind its deploy, whose map may predate the
# change): the others get the map with their next deploy.
SYNCABLE = ("running", "degraded", "starting")
_NOT_NAME = re.compile(r"[^a-z0-9]+")


def _roles_with(permission: str) -> list[str]:
    return [r.name for r in ROLES.values() if permission in r.permissions]


def account_name(project: dict) -> str:
    """The runtime account of a project: its name (unique in its tenant), shortened with an id suffix past 32
    characters (Slurm lowercases account names; project names are lowercase already)."""
    name = project["name"]
    return name if len(name) <= 32 else f"{name[:23].rstrip('-')}-{project['id'].hex[:8]}"


def _name_hint(kind: str, principal: dict) -> str:
    if kind == "user":
        base = _NOT_NAME.sub("", principal["email"].split("@")[0].lower())
    else:
        base = "sa-" + _NOT_NAME.sub("-", principal["name"].lower()).strip("-")
    base = base if base[:1].isalpha() else f"u{base}"
    return base[:19].rstrip("-")  # with "-" and at most 12 hex digits: 32 characters


def identity(conn: psycopg.Connection, kind: str, principal_id: UUID) -> dict:
    """The principal's runtime identity {name, uid}, created on first use: a readable name (the user's email
    local part, or `sa-` and the service account's name) with a suffix of its id, unique on the platform."""
    row = conn.execute("SELECT name, uid FROM runtime_identities WHERE principal_kind = %s AND principal_id = %s",
                       (kind, principal_id)).fetchone()
    if row:
        return row
    table = "users" if kind == "user" else "service_accounts"
    principal = conn.execute(f"SELECT * FROM {table} WHERE id = %s", (principal_id,)).fetchone()  # noqa: S608
    hint = _name_hint(kind, principal)
    for suffix in (principal_id.hex[:4], principal_id.hex[:8], principal_id.hex[:12]):
        row = conn.execute(
            """INSERT INTO runtime_identities (principal_kind, principal_id, name) VALUES (%s, %s, %s)
               ON CONFLICT DO NOTHING RETURNING name, uid""", (kind, principal_id, f"{hint}-{suffix}")).fetchone()
        if row:
            return row
        # a concurrent request may have created this principal's identity
        row = conn.execute("""SELECT name, uid FROM runtime_identities
                               WHERE principal_kind = %s AND principal_id = %s""", (kind, principal_id)).fetchone()
        if row:
            return row
    raise RuntimeError(f"no free runtime identity name for {kind} {principal_id}")


def _holders(conn: psycopg.Connection, project: dict, permission: str) -> set[tuple[str, UUID]]:
    """Live principals holding `permission` in the project (through a project or a tenant binding)."""
    rows = conn.execute(
        """SELECT DISTINCT b.principal_kind, b.principal_id FROM role_bindings b
             LEFT JOIN users u ON b.principal_kind = 'user' AND u.id = b.principal_id
             LEFT JOIN service_accounts s ON b.principal_kind = 'service_account' AND s.id = b.principal_id
            WHERE b.role = ANY(%s)
              AND ((b.scope_kind = 'project' AND b.project_id = %s) OR (b.scope_kind = 'tenant' AND b.tenant_id = %s))
              AND NOT coalesce(u.disabled, s.disabled, true)""",
        (_roles_with(permission), project["id"], project["tenant_id"])).fetchall()
    return {(r["principal_kind"], r["principal_id"]) for r in rows}


def _served(conn: psycopg.Connection, instance: dict) -> tuple[list[dict], dict[tuple[str, UUID], tuple[list, list]]]:
    """The projects the instance serves, and each principal that may submit jobs or log in there: its accounts
    (that of each such project, its first one its default, then those its live grants name) and whether it may log
    in (as a one-item list, set while reading)."""
    projects = scope.attached_projects(conn, instance)
    accounts = {p["id"]: account_name(p) for p in projects}
    served: dict[tuple[str, UUID], tuple[list, list]] = {}
    for project in projects:
        login = {p for p in _holders(conn, project, LOGIN) if p[0] == "user"}
        for principal in _holders(conn, project, SUBMIT) | login:
            names, may_login = served.setdefault(principal, ([], [False]))
            names.append(accounts[project["id"]])
            may_login[0] |= principal in login
    if scope.is_shared(instance):
        # A grant adds exactly the account it names, for a principal that still uses the runtime.
        for g in conn.execute("""SELECT principal_kind, principal_id, target_project_id FROM submit_grants
                                  WHERE instance_id = %s AND revoked_at IS NULL ORDER BY seq""", (instance["id"],)):
            names = served.get((g["principal_kind"], g["principal_id"]), ([],))[0]
            target = accounts.get(g["target_project_id"])  # None: that project was detached
            if (g["principal_kind"], g["principal_id"]) in served and target and target not in names:
                names.append(target)
    return projects, served


def accounts_of(conn: psycopg.Connection, instance: dict, kind: str, principal_id: UUID) -> list[str]:
    """The accounts the principal is associated with on the instance's runtime (none: it does not use it)."""
    return _served(conn, instance)[1].get((kind, principal_id), ([], []))[0]


def access_map(conn: psycopg.Connection, instance: dict) -> dict:
    """The instance's access map: one account per project it serves (its own; for a tenant-shared runtime, every
    attached project's), and one identity per principal that may submit jobs or log in there, with its accounts
    (_served); people who may log in carry their SSH keys."""
    projects, served = _served(conn, instance)
    identities = []
    for (kind, principal_id), (names, may_login) in sorted(served.items(), key=lambda h: (h[0][0], str(h[0][1]))):
        ident = identity(conn, kind, principal_id)
        keys = [r["public_key"] for r in conn.execute(
            "SELECT public_key FROM ssh_keys WHERE user_id = %s ORDER BY seq", (principal_id,))] if may_login[0] else []
        identities.append({"name": ident["name"], "uid": ident["uid"], "account": names[0], "accounts": names,
                           "principal": f"{kind}:{principal_id}", "login": may_login[0], "ssh_keys": keys})
    return {"accounts": [{"name": account_name(p), "project_id": str(p["id"])} for p in projects],
            "identities": identities}


def declares_access(conn: psycopg.Connection, instance: dict) -> AdapterSpec | None:
    spec = stored_spec(get_version_by_id(conn, instance["app_version_id"]))
    return spec if spec.access else None


def queue_sync(conn: psycopg.Connection, settings: OperationSettings, actor: Principal, *,
               project_id: UUID | None = None, tenant_id: UUID | None = None, instance_id: UUID | None = None,
               reason: str, login_only: bool = False) -> list[UUID]:
    """Queue an access_sync on every running instance that serves the project (its own, and the shared runtimes
    it is attached to), or the tenant, or on that one instance, whose app declares access, unless one is already
    queued (it computes the map when it starts, so it carries this change too); with `login_only`, only on those
    the actor may log in to. Called in the transaction that made the change: the operation is queued only if the
    change commits."""
    from ..operations import service as operations  # operations imports this module's callers

    instances = conn.execute(
        """SELECT * FROM app_instances WHERE deleted_at IS NULL AND status = ANY(%(statuses)s)
             AND (project_id = %(p)s OR tenant_id = %(t)s OR id = %(i)s
                  OR id IN (SELECT instance_id FROM instance_attachments WHERE project_id = %(p)s
                               AND status = 'attached')) ORDER BY seq""",
        {"statuses": list(SYNCABLE), "p": project_id, "t": tenant_id, "i": instance_id}).fetchall()
    queued = []
    for instance in instances:
        if declares_access(conn, instance) is None:
            continue
        # A key change matters only where its owner may log in; elsewhere it would only make the instance busy.
        if login_only and not scope.served_by(conn, instance, actor, LOGIN):
            continue
        # Locked: a worker claiming it now (SKIP LOCKED) waits for this change to commit, so the map it builds
        # carries the change; one it claimed before is no longer queued here, and a new sync is queued.
        waiting = conn.execute("""SELECT 1 FROM operations WHERE instance_id = %s AND kind = 'access_sync'
                                    AND status = 'queued' FOR UPDATE""", (instance["id"],)).fetchone()
        if waiting:
            continue
        try:
            with conn.transaction():  # savepoint: a refusal leaves the change itself in place
                op = operations.accept(conn, settings, actor, instance["id"], "access_sync", {"reason": reason})
        except ApiError as exc:  # going away (a decommission queued), or a full queue: its next run carries the map
            log.warning("access_sync not queued: the instance's next run applies the change",
                        extra={"instance_id": str(instance["id"]), "reason": exc.code})
            continue
        queued.append(op["id"])
    if queued:
        log.info("access_sync queued", extra={"reason": reason, "operations": [str(q) for q in queued]})
    return queued


def login_for(conn: psycopg.Connection, spec: AdapterSpec, instance: dict, caller: Principal) -> dict:
    """The caller's login on the instance: runtime identity, default account (its first project the instance
    serves), the login hosts, and whether the hosts already carry the platform's latest access map (no
    access_sync queued or running)."""
    from ..executor.plan import SERVING, live_members

    project = scope.caller_projects(conn, instance, caller, LOGIN)[0]
    ident = identity(conn, caller.kind, caller.id)
    hosts = [{"node_name": m["node_name"], "address": (m["host"] or {}).get("address", m["host_name"]),
              "port": (m["host"] or {}).get("ssh_port", 22)}
             for m in live_members(conn, instance["id"])
             if m["role"] == spec.access.login_role and m["status"] in SERVING]
    pending = conn.execute("""SELECT 1 FROM operations WHERE instance_id = %s AND kind = 'access_sync'
                                AND status IN ('queued', 'running')""", (instance["id"],)).fetchone()
    count = conn.execute("SELECT count(*) AS n FROM ssh_keys WHERE user_id = %s", (caller.id,)).fetchone()["n"]
    return {"username": ident["name"], "uid": ident["uid"], "account": account_name(project), "login_hosts": hosts,
            "ssh_keys": count, "synced": pending is None}


def binding_changed(conn: psycopg.Connection, settings: OperationSettings, actor: Principal, binding: dict,
                    action: str) -> None:
    """A role binding was created or deleted: the instances of its project (or its tenant) follow."""
    if binding["scope_kind"] != "platform":
        queue_sync(conn, settings, actor, project_id=binding["project_id"],
                   tenant_id=binding["tenant_id"] if binding["scope_kind"] == "tenant" else None,
                   reason=f"{action} {binding['role']} for {binding['principal_kind']} {binding['principal_id']}")


def fingerprint(public_key: str) -> str:
    """OpenSSH's SHA256 fingerprint of a public key line."""
    blob = base64.b64decode(public_key.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# The description the app's account module marks the platform's accounts with (slurm_accounts's
# description_prefix); accounts without it are someone else's and left alone.
PLATFORM_ACCOUNT_PREFIX = "gpuaas project "


def drift(db: Database, settings: OperationSettings, caller: Principal, instance_id: UUID) -> dict:
    """How the runtime's accounts and associations differ from the platform's intent (the access map): accounts
    and associations missing, and platform accounts or associations on them that the map does not name (made by
    hand, or left by a failed run). An access_sync repairs all of it. The runtime is asked outside any
    transaction."""
    from ..instances import service as instances
    from ..scheduler import gateway

    with db.transaction() as conn:
        instance = instances.get_instance(conn, instance_id)
        caller.require("apps.instance.update", tenant_id=instance["tenant_id"], project_id=instance["project_id"])
        if declares_access(conn, instance) is None:
            raise conflict("no_login", "this instance's app keeps no accounts (its adapter declares no access)")
        intent = access_map(conn, instance)
        gw = gateway.for_instance(conn, settings, instance)
    actual = gw.call("GET", "/v1/accounting", {"accounts": [a["name"] for a in intent["accounts"]],
                                                "node_operate": False, "accounting": True})
    return compare(intent, actual)


def compare(intent: dict, actual: dict) -> dict:
    """The drift report of an access map against the runtime's accounting (the gateway's GET /v1/accounting)."""
    wanted = {a["name"] for a in intent["accounts"]}
    present = {a["name"]: a.get("description") or "" for a in actual.get("accounts") or []}
    platform = {name for name, text in present.items() if text.lower().startswith(PLATFORM_ACCOUNT_PREFIX)}
    wanted_assocs = {(account, i["name"]) for i in intent["identities"] for account in i["accounts"]}
    present_assocs = {(a["account"], a["user"]) for a in actual.get("associations") or []
                      if a["account"] in platform | wanted}

    def assocs(pairs: set[tuple[str, str]]) -> list[dict]:
        return [{"account": a, "user": u} for a, u in sorted(pairs)]

    report = {"missing_accounts": sorted(wanted - set(present)),
              "unexpected_accounts": sorted(platform - wanted),
              # an account the map needs that someone else made: the sync refuses to take it over
              "foreign_accounts": sorted((wanted & set(present)) - platform),
              "missing_associations": assocs(wanted_assocs - present_assocs),
              "unexpected_associations": assocs(present_assocs - wanted_assocs)}
    return {"in_sync": not any(report.values())} | report

"""Tenant-private registries (docs/control-service.md "Tenant-private registries").

A platform admin keeps an allowlist of registry hosts (`host[:port]`). A tenant admin registers a registry of its
tenant on an allowlisted host, with a username and password: the password is Fernet-encrypted with the service's
secret key (secrets/service.py `cipher`), never stored in clear and never answered. Its images back that tenant's
private app versions: a run of one of the tenant's instances of its private app whose version pins an image there
gets the registry's credentials as its pull credential (`run_credential`), with the custody of the platform
registry's per-run credential: in the run's secret variables only, masked in its output, and an instance event that
names the registry and the username, never the password. Nothing else gets them: an image of that host pinned by a
platform app or another tenant's app is pulled without them (registering one is not refused: a refusal would tell
everyone which hosts some tenant registered, and let a tenant close a shared host to the platform's apps)."""

from __future__ import annotations

from uuid import UUID

import psycopg
from cryptography.fernet import Fernet, InvalidToken

from ..audit import service as audit
from ..config import OperationSettings
from ..errors import ApiError, conflict, not_found, unprocessable
from ..iam.auth import Principal
from ..secrets import service as secrets

# What an answer, an audit row or an event may say of a registry: everything but the sealed password.
PUBLIC = ("id", "tenant_id", "name", "host", "username", "created_by_kind", "created_by", "created_at",
          "credentials_rotated_at")


def public(row: dict) -> dict:
    return {k: row[k] for k in PUBLIC} | {"credentials_set": row["password_sealed"] is not None}


def _cipher(settings: OperationSettings) -> Fernet:
    return secrets.cipher(settings)


def check_not_reserved(settings: OperationSettings, host: str) -> None:
    """The platform's own registries (pull_credential_registries) get per-run credentials of the platform: no tenant
    registry may take one of their hosts."""
    if host in settings.pull_credential_registries:
        raise unprocessable("registry_host_reserved", f"{host} is the platform's own registry (its runs get per-run "
                            "pull credentials of the platform): it cannot be a tenant's private registry", host=host)


# -- the allowlist (platform admins) ------------------------------------------------------------------------

def allowlist_add(conn: psycopg.Connection, actor: Principal, settings: OperationSettings, host: str,
                  note: str) -> dict:
    check_not_reserved(settings, host)
    row = conn.execute("""INSERT INTO registry_allowlist (host, note, added_by_kind, added_by)
                          VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING *""",
                       (host, note, actor.kind, actor.id)).fetchone()
    if row is None:
        raise conflict("already_exists", f"{host} is on the allowlist already", host=host)
    audit.record(conn, actor, "registries.allowlist.add", "registry_host", host, after=row)
    return row


def allowlist_get(conn: psycopg.Connection, host: str) -> dict:
    row = conn.execute("SELECT * FROM registry_allowlist WHERE host = %s", (host,)).fetchone()
    if row is None:
        raise not_found("registry_host", host)
    return row


def allowlist_remove(conn: psycopg.Connection, actor: Principal, host: str) -> dict:
    """Off the allowlist; the tenants' registries on it stay, but no run gets their credentials any more (a run that
    needs them fails before it starts) and none can be registered there."""
    row = conn.execute("DELETE FROM registry_allowlist WHERE host = %s RETURNING *", (host,)).fetchone()
    if row is None:
        raise not_found("registry_host", host)
    users = conn.execute("SELECT count(*) AS n FROM tenant_registries WHERE host = %s AND deleted_at IS NULL",
                         (host,)).fetchone()["n"]
    audit.record(conn, actor, "registries.allowlist.remove", "registry_host", host, before=row,
                 after={"tenant_registries_left": users})
    return row


# -- a tenant's registries (its tenant admin) --------------------------------------------------------------

def create(conn: psycopg.Connection, actor: Principal, settings: OperationSettings, tenant_id: UUID, name: str,
           host: str, username: str, password: str) -> dict:
    check_not_reserved(settings, host)
    if conn.execute("SELECT 1 FROM registry_allowlist WHERE host = %s", (host,)).fetchone() is None:
        raise unprocessable("registry_not_allowlisted", f"{host} is not on the platform's registry allowlist: a "
                            "platform admin adds it (gpuaas registries allowlist add) before a tenant registers it",
                            host=host)
    taken = conn.execute("""SELECT name, host FROM tenant_registries WHERE tenant_id = %s AND deleted_at IS NULL
                             AND (name = %s OR host = %s)""", (tenant_id, name, host)).fetchone()
    if taken:
        what = f"host {host}" if taken["host"] == host else f"name {name}"
        raise conflict("already_exists", f"the tenant has a registry with {what} already: rotate its credentials "
                       "or remove it first", name=name, host=host)
    row = conn.execute(
        """INSERT INTO tenant_registries (tenant_id, name, host, username, password_sealed, created_by_kind, created_by)
           VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING *""",
        (tenant_id, name, host, username, _cipher(settings).encrypt(password.encode()), actor.kind, actor.id),
    ).fetchone()
    audit.record(conn, actor, "registries.tenant.create", "tenant_registry", row["id"], after=public(row),
                 context={"tenant_id": tenant_id})
    return row


def get(conn: psycopg.Connection, tenant_id: UUID, registry_id: UUID, lock: bool = False) -> dict:
    query = "SELECT * FROM tenant_registries WHERE id = %s AND tenant_id = %s AND deleted_at IS NULL"
    row = conn.execute(query + (" FOR UPDATE" if lock else ""), (registry_id, tenant_id)).fetchone()  # noqa: S608
    if row is None:
        raise not_found("tenant_registry", registry_id)
    return row


def rotate(conn: psycopg.Connection, actor: Principal, settings: OperationSettings, tenant_id: UUID,
           registry_id: UUID, username: str, password: str) -> dict:
    before = get(conn, tenant_id, registry_id, lock=True)
    row = conn.execute("""UPDATE tenant_registries SET username = %s, password_sealed = %s,
                              credentials_rotated_at = now() WHERE id = %s RETURNING *""",
                       (username, _cipher(settings).encrypt(password.encode()), registry_id)).fetchone()
    audit.record(conn, actor, "registries.tenant.rotate", "tenant_registry", registry_id,
                 before={"username": before["username"]}, after={"username": username},
                 context={"tenant_id": tenant_id})
    return row


def delete(conn: psycopg.Connection, actor: Principal, tenant_id: UUID, registry_id: UUID) -> dict:
    """The registry goes and its password with it; the row stays (deleted) so that a run of a version pinning an
    image there fails with that reason."""
    before = get(conn, tenant_id, registry_id, lock=True)
    row = conn.execute("""UPDATE tenant_registries SET deleted_at = now(), password_sealed = NULL WHERE id = %s
                          RETURNING *""", (registry_id,)).fetchone()
    audit.record(conn, actor, "registries.tenant.delete", "tenant_registry", registry_id, before=public(before),
                 context={"tenant_id": tenant_id})
    return row


# -- what the catalog and runs ask ---------------------------------------------------------------------------

def run_credential(conn: psycopg.Connection, settings: OperationSettings, instance: dict, version: dict,
                   operation_id: UUID | None) -> dict[str, str] | None:
    """The pull credential {registry, username, password} of the instance's own tenant's registry that the version's
    workload image is in, or None when it is in none of them (or the version's app is not the tenant's private app:
    nothing of a tenant's registry reaches a platform app's run). A registry deleted or taken off the allowlist fails
    the run before it starts (422 tenant_registry_unavailable)."""
    host = version.get("workload_artifact_registry")
    if not host or version["app_tenant_id"] is None or version["app_tenant_id"] != instance["tenant_id"]:
        return None
    row = conn.execute(
        """SELECT r.*, EXISTS (SELECT 1 FROM registry_allowlist a WHERE a.host = r.host) AS allowlisted
             FROM tenant_registries r WHERE r.tenant_id = %s AND r.host = %s
            ORDER BY r.deleted_at IS NULL DESC, r.deleted_at DESC LIMIT 1""",
        (instance["tenant_id"], host)).fetchone()
    if row is None:
        return None
    image = f"{host}/{version['workload_artifact_repository']}"
    if row["deleted_at"] is not None:
        raise unprocessable("tenant_registry_unavailable", f"the image {image} is in the tenant's private registry "
                            f"{row['name']} ({host}), which was removed: register it again to run this version",
                            registry=host)
    if not row["allowlisted"]:
        raise unprocessable("tenant_registry_unavailable", f"the image {image} is in the tenant's private registry "
                            f"{row['name']} ({host}), which is no longer on the platform's registry allowlist",
                            registry=host)
    try:
        password = _cipher(settings).decrypt(bytes(row["password_sealed"])).decode()
    except InvalidToken:
        raise ApiError(503, "service_misconfigured", "the tenant registry's password was sealed with another secret "
                       "key: every serve replica and worker needs the same GPUAAS_SECRET_KEY") from None
    audit.append_event(conn, instance, "tenant_registry.credential_issued", {
        "tenant_registry_id": str(row["id"]), "registry": host, "username": row["username"],
        "operation_id": str(operation_id) if operation_id else None})
    return {"registry": host, "username": row["username"], "password": password}

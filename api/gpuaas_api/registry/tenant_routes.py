"""Routes of tenant-private registries (tenant.py): the platform's allowlist of registry hosts (platform admins) and
each tenant's registries (its tenant admin). No answer carries a password: `credentials_set` says whether one is
kept."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import Path
from pydantic import BaseModel, ConfigDict, StringConstraints

from .. import docs, errors
from ..common import Name, Page, decode_cursor, page_of
from ..deps import DB, Caller, CursorParam, LimitParam, RunSettings, router
from ..iam.service import get_tenant
from ..location import LocatedRoute
from . import tenant

api = router("registries")
api.route_class = LocatedRoute  # Location on 201 (gpuaas_api.location)

ALLOWLIST = "registries.allowlist.manage"
READ, WRITE = "registries.tenant.read", "registries.tenant.write"

# host[:port] as an image reference names its registry (catalog/rules.py parse_reference: a first component with a
# dot or a port, or localhost), in lowercase: one spelling per host.
RegistryHost = Annotated[str, StringConstraints(max_length=255, pattern=(
    r"^(localhost(:[0-9]{1,5})?|[a-z0-9-]+(\.[a-z0-9-]+)+(:[0-9]{1,5})?|[a-z0-9-]+:[0-9]{1,5})$"))]
# HTTP Basic: a username without ":"; printable ASCII, no line breaks.
Username = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^[\x21-\x39\x3b-\x7e]+$")]
Password = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^[\x20-\x7e]+$")]
HostPath = Annotated[RegistryHost, Path(description="the registry host, host[:port]")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AllowlistAdd(Strict):
    host: RegistryHost
    note: Annotated[str, StringConstraints(max_length=500, pattern=r"^[^\x00]*$")] = ""


class AllowlistEntry(BaseModel):
    host: str
    note: str
    added_by_kind: str
    added_by: UUID | None
    created_at: datetime


class RegistryCreate(Strict):
    name: Name
    host: RegistryHost
    username: Username
    password: Password


class RegistryCredentials(Strict):
    username: Username
    password: Password


class TenantRegistry(BaseModel):
    id: UUID
    tenant_id: UUID
    name: str
    host: str
    username: str
    credentials_set: bool
    created_by_kind: str
    created_by: UUID | None
    created_at: datetime
    credentials_rotated_at: datetime | None


# -- the allowlist ---------------------------------------------------------------------------------------------

@api.get("/v1/registries/allowlist", operation_id="registry_allowlist_list", response_model=Page[AllowlistEntry])
def list_allowlist(caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    """The registry hosts tenants may register as their private registries (platform admins), oldest first."""
    caller.require(ALLOWLIST)
    with db.transaction() as conn:
        rows = conn.execute("SELECT * FROM registry_allowlist WHERE seq > %s ORDER BY seq LIMIT %s",
                            (decode_cursor(cursor) or 0, limit + 1)).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.post("/v1/registries/allowlist", operation_id="registry_allowlist_add", response_model=AllowlistEntry,
          status_code=201, openapi_extra=docs.example({"host": "registry.acme.example:5000",
                                                       "note": "ACME's own registry, contract 2026-114"}),
          responses=errors.responses("already_exists", "registry_host_reserved"))
def add_to_allowlist(body: AllowlistAdd, caller: Caller, db: DB, settings: RunSettings):
    """Allow tenants to register a registry on this host (platform admins; audited). The platform's own registries
    (setting pull_credential_registries) are refused: 422 registry_host_reserved."""
    caller.require(ALLOWLIST)
    with db.transaction() as conn:
        return tenant.allowlist_add(conn, caller, settings, body.host, body.note)


@api.get("/v1/registries/allowlist/{host}", operation_id="registry_allowlist_get", response_model=AllowlistEntry)
def get_allowlisted(host: HostPath, caller: Caller, db: DB):
    """One allowlisted host (platform admins)."""
    caller.require(ALLOWLIST)
    with db.transaction() as conn:
        return tenant.allowlist_get(conn, host)


@api.delete("/v1/registries/allowlist/{host}", operation_id="registry_allowlist_remove", response_model=AllowlistEntry)
def remove_from_allowlist(host: HostPath, caller: Caller, db: DB):
    """Take a host off the allowlist (platform admins; audited). The tenants' registries on it stay, but a run that
    needs their credentials fails before it starts (tenant_registry_unavailable) until the host is allowed again."""
    caller.require(ALLOWLIST)
    with db.transaction() as conn:
        return tenant.allowlist_remove(conn, caller, host)


# -- a tenant's registries -------------------------------------------------------------------------------------

@api.post("/v1/tenants/{tenant_id}/registries", operation_id="tenant_registries_create",
          response_model=TenantRegistry, status_code=201,
          openapi_extra=docs.example({"name": "acme-images", "host": "registry.acme.example:5000",
                                      "username": "gpuaas-pull", "password": "an example password"}),
          responses=errors.responses("already_exists", "registry_not_allowlisted", "registry_host_reserved"))
def create_registry(tenant_id: UUID, body: RegistryCreate, caller: Caller, db: DB, settings: RunSettings):
    """Register a private registry of the tenant (its tenant admin) on a host the platform allowlisted (422
    registry_not_allowlisted otherwise); its images back the tenant's private app versions, and the tenant's runs
    of them pull with these credentials. The password is kept encrypted and never answered. Audited without it."""
    with db.transaction() as conn:
        get_tenant(conn, tenant_id)
        caller.require(WRITE, tenant_id=tenant_id)
        return tenant.public(tenant.create(conn, caller, settings, tenant_id, body.name, body.host, body.username,
                                           body.password))


@api.get("/v1/tenants/{tenant_id}/registries", operation_id="tenant_registries_list",
         response_model=Page[TenantRegistry])
def list_registries(tenant_id: UUID, caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    """The tenant's private registries, oldest first (never their passwords)."""
    with db.transaction() as conn:
        get_tenant(conn, tenant_id)
        caller.require(READ, tenant_id=tenant_id)
        rows = conn.execute("""SELECT * FROM tenant_registries WHERE tenant_id = %s AND deleted_at IS NULL
                               AND seq > %s ORDER BY seq LIMIT %s""",
                            (tenant_id, decode_cursor(cursor) or 0, limit + 1)).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": [tenant.public(r) for r in items], "next_cursor": nxt}


@api.get("/v1/tenants/{tenant_id}/registries/{registry_id}", operation_id="tenant_registries_get",
         response_model=TenantRegistry)
def get_registry(tenant_id: UUID, registry_id: UUID, caller: Caller, db: DB):
    """One of the tenant's private registries (never its password)."""
    with db.transaction() as conn:
        get_tenant(conn, tenant_id)
        caller.require(READ, tenant_id=tenant_id)
        return tenant.public(tenant.get(conn, tenant_id, registry_id))


@api.put("/v1/tenants/{tenant_id}/registries/{registry_id}/credentials", operation_id="tenant_registries_rotate",
         response_model=TenantRegistry,
         openapi_extra=docs.example({"username": "gpuaas-pull", "password": "the new example password"}))
def rotate_credentials(tenant_id: UUID, registry_id: UUID, body: RegistryCredentials, caller: Caller, db: DB,
                       settings: RunSettings):
    """Replace the registry's username and password (its tenant admin); runs from now on pull with them. Audited
    with the usernames, never a password."""
    with db.transaction() as conn:
        get_tenant(conn, tenant_id)
        caller.require(WRITE, tenant_id=tenant_id)
        return tenant.public(tenant.rotate(conn, caller, settings, tenant_id, registry_id, body.username,
                                           body.password))


@api.delete("/v1/tenants/{tenant_id}/registries/{registry_id}", operation_id="tenant_registries_delete",
            response_model=TenantRegistry)
def delete_registry(tenant_id: UUID, registry_id: UUID, caller: Caller, db: DB):
    """Remove the registry and its password (its tenant admin; audited). A run of a version pinning one of its
    images fails before it starts (tenant_registry_unavailable) until the tenant registers the host again."""
    with db.transaction() as conn:
        get_tenant(conn, tenant_id)
        caller.require(WRITE, tenant_id=tenant_id)
        return tenant.public(tenant.delete(conn, caller, tenant_id, registry_id))

"""Whose catalog an app is in, and who publishes to it (docs/control-service.md "Publishers and tenant-private
apps").

An app is in the platform catalog (`tenant_id` NULL), which every tenant sees and uses, or in one tenant's
private catalog, which only that tenant's principals see and only its projects use. Its artifacts and versions
are in its catalog. Whatever names an app another tenant keeps private is answered as for an app that does not
exist: the same 404. Publishing (`apps.catalog.publish`) into the platform catalog takes a platform-scope
binding; into a tenant's, a binding at that tenant (its tenant admin's grant) held by one of its own principals."""

from __future__ import annotations

import dataclasses
from uuid import UUID

import psycopg

from ..errors import forbidden, hidden, not_found, unprocessable
from ..iam.auth import Principal
from . import service

PUBLISH = "apps.catalog.publish"


def in_catalog_of(app: dict, tenant_id: UUID | None) -> bool:
    """Whether the app is seen and used by this tenant (None: the platform's own principals)."""
    return app["tenant_id"] is None or app["tenant_id"] == tenant_id


def app_for(conn: psycopg.Connection, caller: Principal, slug: str) -> dict:
    """The app as the caller may see it."""
    app = service.get_app(conn, slug)
    if not in_catalog_of(app, caller.tenant_id):
        raise not_found("app", slug)
    return app


def app_for_project(conn: psycopg.Connection, caller: Principal, project: dict, slug: str) -> dict:
    """The app as a project may use it (entitle it, create instances of it) and the caller see it: a platform
    admin entitles projects to platform apps only."""
    app = service.get_app(conn, slug)
    if not (in_catalog_of(app, project["tenant_id"]) and in_catalog_of(app, caller.tenant_id)):
        raise not_found("app", slug)
    return app


def artifact_for(conn: psycopg.Connection, caller: Principal, artifact_id: UUID) -> dict:
    artifact = service.get_artifact(conn, artifact_id)
    if not in_catalog_of({"tenant_id": artifact["app_tenant_id"]}, caller.tenant_id):
        raise not_found("artifact", artifact_id)
    return artifact


def require_publish(caller: Principal, tenant_id: UUID | None) -> None:
    """403 for a caller who sees the catalog but may not publish to it; another tenant's private catalog is
    the 404 of the tenant it names (hidden)."""
    if tenant_id is None:
        # Platform scope only: a tenant's binding does not reach the platform catalog. A tenant's principal holding
        # a platform binding still acts from its own project if it is a service account (Principal.permits).
        caller.require(PUBLISH, project_id=caller.project_id)
    elif caller.tenant_id != tenant_id:
        if not caller.sees(tenant_id, None):
            raise hidden(tenant_id, None)
        raise forbidden("a tenant's private apps are published by the tenant's own publishers", permission=PUBLISH)
    else:
        # Not through a platform binding: the platform's trust in a tenant's app developer (a platform publisher)
        # is not the tenant admin's grant.
        tenant_bindings = tuple(b for b in caller.bindings if b.scope_kind != "platform")
        dataclasses.replace(caller, bindings=tenant_bindings).require(PUBLISH, tenant_id=tenant_id,
                                                                      project_id=caller.project_id)


def check_slug(conn: psycopg.Connection, slug: str, tenant: dict | None) -> None:
    """Slugs are one namespace, split by tenant: a private app's slug starts with its tenant's name and a dash, and a
    platform app's with no tenant's name and a dash. Tenant names are prefix-free with respect to "-"
    (iam.service.check_tenant_name), so a slug has at most one owning tenant, and only that tenant's publishers can
    meet another app under it: a refused or taken slug tells nobody that another tenant keeps an app by that name.
    The platform's refusal is the same whatever apps exist, and names no tenant."""
    if tenant is not None:
        if not slug.startswith(tenant["name"] + "-"):
            raise unprocessable("app_slug_namespace", f"a private app of tenant {tenant['name']} is named "
                                f"{tenant['name']}-<name>", prefix=tenant["name"] + "-")
    elif conn.execute("SELECT 1 FROM tenants WHERE starts_with(%s, name || '-') LIMIT 1", (slug,)).fetchone():
        raise unprocessable("app_slug_namespace", "a platform app's slug does not start with a tenant's name and a "
                            "dash: those slugs are the tenant's private apps'", slug=slug)

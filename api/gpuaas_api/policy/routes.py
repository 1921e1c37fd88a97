from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from fastapi import Path, Query

from .. import docs, errors
from ..audit import service as audit
from ..catalog.scope import app_for_project
from ..common import Page, Slug, decode_cursor, keyset_page, page_of
from ..deps import DB, Caller, CursorParam, LimitParam, router
from ..errors import conflict, not_found, unprocessable
from ..iam.service import get_project, get_tenant
from . import rules, service
from .schemas import EffectiveDimension, EffectivePolicy, Entitlement, EntitlementCreate, Overlay, OverlayCreate

api = router("policy")


def entitlement_key(app: dict) -> str:
    """Who entitles projects to an app: the platform's admins for a platform app, the tenant's for its own."""
    return "policy.entitlement.write" if app["tenant_id"] is None else "policy.entitlement.private.write"


@api.post("/v1/projects/{project_id}/entitlements", operation_id="entitlements_create",
          openapi_extra=docs.example({'app_slug': 'hpc-cluster'}),
          response_model=Entitlement, status_code=201)
def create_entitlement(project_id: UUID, body: EntitlementCreate, caller: Caller, db: DB):
    """Entitle a project to an app (optionally to some of its versions) so it may create instances of it: a
    platform app (platform admins), or a private app of the project's tenant (its tenant admins)."""
    with db.transaction() as conn:
        project = get_project(conn, project_id)
        app = app_for_project(conn, caller, project, body.app_slug)
        caller.require(entitlement_key(app), tenant_id=project["tenant_id"], project_id=project_id)
        if service.is_entitled(conn, project_id, body.app_slug):
            raise conflict("already_exists", f"project is already entitled to {body.app_slug}")
        row = conn.execute(
            "INSERT INTO entitlements (tenant_id, project_id, app_slug) VALUES (%s, %s, %s) RETURNING *",
            (project["tenant_id"], project_id, body.app_slug),
        ).fetchone()
        audit.record(conn, caller, "policy.entitlement.create", "entitlement", row["id"], after=row,
                     context={"tenant_id": project["tenant_id"], "project_id": project_id,
                              "app_slug": body.app_slug})
    return row


@api.get("/v1/projects/{project_id}/entitlements", operation_id="entitlements_list", response_model=Page[Entitlement])
def list_entitlements(project_id: UUID, caller: Caller, db: DB, cursor: CursorParam = None,
                      limit: LimitParam = 50):
    """The project's entitlements."""
    with db.transaction() as conn:
        project = get_project(conn, project_id)
        caller.require("policy.entitlement.read", tenant_id=project["tenant_id"], project_id=project_id)
        return keyset_page(conn, "entitlements", cursor, limit, project_id=project_id)


@api.delete("/v1/projects/{project_id}/entitlements/{app_slug}", operation_id="entitlements_delete", status_code=204)
def delete_entitlement(project_id: UUID, app_slug: Annotated[Slug, Path()], caller: Caller, db: DB):
    """Withdraws the entitlement for new instances; existing instances keep running."""
    with db.transaction() as conn:
        project = get_project(conn, project_id)
        app = app_for_project(conn, caller, project, app_slug)
        caller.require(entitlement_key(app), tenant_id=project["tenant_id"], project_id=project_id)
        row = conn.execute("DELETE FROM entitlements WHERE project_id = %s AND app_slug = %s RETURNING *",
                           (project_id, app_slug)).fetchone()
        if row is None:
            raise not_found("entitlement", f"{project_id}/{app_slug}")
        audit.record(conn, caller, "policy.entitlement.delete", "entitlement", row["id"], before=row,
                     context={"tenant_id": project["tenant_id"], "project_id": project_id, "app_slug": app_slug})


@api.post("/v1/policy/overlays", operation_id="policy_overlays_create",
          openapi_extra=docs.example({'scope_kind': 'tenant',
                                      'tenant_id': '2c9e8f1a-5b4d-4c3e-8a7f-6e5d4c3b2a10',
                                      'dimension': 'region',
                                      'effect': 'allow',
                                      'values': ['eu-west-1']}),
          responses=errors.responses("overlay_widens_policy", "invalid_scope", "missing_scope"),
                                     response_model=Overlay, status_code=201)
def create_overlay(body: OverlayCreate, caller: Caller, db: DB):
    """Add a policy overlay (limits, allowed versions or regions) at platform, tenant or project scope."""
    with db.transaction() as conn:
        return service.create_overlay(conn, caller, body)


@api.get("/v1/policy/overlays", operation_id="policy_overlays_list", response_model=Page[Overlay])
def list_overlays(caller: Caller, db: DB,
                  scope_kind: Annotated[Literal["global", "tenant", "project"], Query()] = "global",
                  tenant_id: UUID | None = None, project_id: UUID | None = None,
                  cursor: CursorParam = None, limit: LimitParam = 50):
    """Overlays written at one scope: global, a tenant (tenant_id) or a project (project_id)."""
    with db.transaction() as conn:
        if scope_kind == "global":
            caller.require_anywhere("policy.overlay.read")
        elif scope_kind == "tenant":
            if tenant_id is None:
                raise unprocessable("missing_scope", "scope_kind=tenant needs tenant_id")
            get_tenant(conn, tenant_id)
            caller.require("policy.overlay.read", tenant_id=tenant_id)
        else:
            if project_id is None:
                raise unprocessable("missing_scope", "scope_kind=project needs project_id")
            project = get_project(conn, project_id)
            caller.require("policy.overlay.read", tenant_id=project["tenant_id"], project_id=project_id)
        rows = conn.execute(
            """SELECT * FROM policy_overlays WHERE scope_kind = %(s)s
                 AND (%(s)s <> 'tenant' OR tenant_id = %(t)s) AND (%(s)s <> 'project' OR project_id = %(p)s)
                 AND seq > %(after)s ORDER BY seq LIMIT %(limit)s""",
            {"s": scope_kind, "t": tenant_id, "p": project_id, "after": decode_cursor(cursor) or 0,
             "limit": limit + 1},
        ).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.delete("/v1/policy/overlays/{overlay_id}", operation_id="policy_overlays_delete", status_code=204)
def delete_overlay(overlay_id: UUID, caller: Caller, db: DB):
    """Remove a policy overlay."""
    with db.transaction() as conn:
        service.delete_overlay(conn, caller, overlay_id)


@api.get("/v1/projects/{project_id}/policy/effective", operation_id="policy_effective_get",
         response_model=EffectivePolicy)
def effective_policy(project_id: UUID, caller: Caller, db: DB):
    """The policy that applies to a project: its overlays merged into allow and deny sets per dimension."""
    with db.transaction() as conn:
        project = get_project(conn, project_id)
        caller.require("policy.overlay.read", tenant_id=project["tenant_id"], project_id=project_id)
        eff = rules.effective(service.overlays_for(conn, project["tenant_id"], project_id))
    return EffectivePolicy(project_id=project_id, dimensions=[
        EffectiveDimension(dimension=d, allow=None if e.allow is None else sorted(e.allow), deny=sorted(e.deny))
        for d, e in eff.items()])

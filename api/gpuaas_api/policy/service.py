from __future__ import annotations

from uuid import UUID

import psycopg

from ..audit import service as audit
from ..errors import conflict, not_found, unprocessable
from ..iam.auth import Principal
from ..iam.service import get_project, get_tenant
from .rules import widening_problems


def overlays_for(conn: psycopg.Connection, tenant_id: UUID | None, project_id: UUID | None) -> list[dict]:
    """Overlays that apply to a project (global + its tenant + itself), or to a tenant."""
    return conn.execute(
        """SELECT * FROM policy_overlays
            WHERE scope_kind = 'global'
               OR (scope_kind = 'tenant' AND tenant_id = %s)
               OR (scope_kind = 'project' AND project_id = %s)""",
        (tenant_id, project_id),
    ).fetchall()


def is_entitled(conn: psycopg.Connection, project_id: UUID, app_slug: str) -> bool:
    return conn.execute("SELECT 1 FROM entitlements WHERE project_id = %s AND app_slug = %s",
                        (project_id, app_slug)).fetchone() is not None


def create_overlay(conn: psycopg.Connection, actor: Principal, body) -> dict:
    tenant_id, project_id = body.tenant_id, body.project_id
    if body.scope_kind == "project":
        project = get_project(conn, project_id)
        if tenant_id is not None and tenant_id != project["tenant_id"]:
            raise unprocessable("invalid_scope", "project does not belong to that tenant")
        tenant_id = project["tenant_id"]
    elif body.scope_kind == "tenant":
        get_tenant(conn, tenant_id)
    actor.require("policy.overlay.write", tenant_id=tenant_id, project_id=project_id)
    if body.scope_kind != "global":
        parents = [o for o in overlays_for(conn, tenant_id, None)
                   if body.scope_kind == "project" or o["scope_kind"] == "global"]
        problems = widening_problems(parents, body.dimension, body.effect, body.values)
        if problems:
            raise conflict("overlay_widens_policy", "tenant and project overlays can only narrow policy",
                           problems=problems)
    if conn.execute(
        """SELECT 1 FROM policy_overlays WHERE scope_kind = %s AND tenant_id IS NOT DISTINCT FROM %s
             AND project_id IS NOT DISTINCT FROM %s AND dimension = %s AND effect = %s""",
        (body.scope_kind, tenant_id, project_id, body.dimension, body.effect),
    ).fetchone():
        raise conflict("already_exists", "an overlay for this scope, dimension and effect exists; delete it first")
    row = conn.execute(
        """INSERT INTO policy_overlays (scope_kind, tenant_id, project_id, dimension, effect, "values")
           VALUES (%s, %s, %s, %s, %s, %s) RETURNING *""",
        (body.scope_kind, tenant_id, project_id, body.dimension, body.effect, sorted(set(body.values))),
    ).fetchone()
    audit.record(conn, actor, "policy.overlay.create", "policy_overlay", row["id"], after=row,
                 context={"tenant_id": tenant_id, "project_id": project_id})
    return row


def delete_overlay(conn: psycopg.Connection, actor: Principal, overlay_id: UUID) -> None:
    row = conn.execute("SELECT * FROM policy_overlays WHERE id = %s FOR UPDATE", (overlay_id,)).fetchone()
    if row is None:
        raise not_found("policy_overlay", overlay_id)
    actor.require("policy.overlay.write", tenant_id=row["tenant_id"], project_id=row["project_id"])
    conn.execute("DELETE FROM policy_overlays WHERE id = %s", (overlay_id,))
    audit.record(conn, actor, "policy.overlay.delete", "policy_overlay", overlay_id, before=row,
                 context={"tenant_id": row["tenant_id"], "project_id": row["project_id"]})

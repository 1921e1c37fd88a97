"""Which projects an instance serves (docs/tenant-shared.md): a project-scope instance serves its own project; a
tenant-shared runtime (control_plane_scope 'tenant') serves the projects attached to it, its owner first. A caller
uses such a runtime through the projects in which it holds the key a route needs, each with its own account: the
authorization model is the project one, whatever the scope."""

from __future__ import annotations

import psycopg

from ..iam.auth import Principal


def is_shared(instance: dict) -> bool:
    return instance["control_plane_scope"] == "tenant"


def attached_projects(conn: psycopg.Connection, instance: dict, *, with_detached: bool = False) -> list[dict]:
    """The projects the instance serves, its own first; `with_detached` adds those detached since (a job they ran
    is still theirs)."""
    if not is_shared(instance):
        return [conn.execute("SELECT * FROM projects WHERE id = %s", (instance["project_id"],)).fetchone()]
    return conn.execute(
        """SELECT p.* FROM projects p
             JOIN (SELECT project_id, bool_or(owner) AS owner, min(seq) AS seq FROM instance_attachments
                    WHERE instance_id = %s AND (status = 'attached' OR %s) GROUP BY project_id) a
               ON a.project_id = p.id
            ORDER BY a.owner DESC, a.seq""", (instance["id"], with_detached)).fetchall()


def caller_projects(conn: psycopg.Connection, instance: dict, caller: Principal, permission: str) -> list[dict]:
    """The projects served by the instance in which the caller holds `permission`; none is the same 403 (or 404,
    when the caller may not even know of the instance) it gets for a project-scope instance."""
    projects = attached_projects(conn, instance)
    mine = [p for p in projects if caller.permits(permission, tenant_id=instance["tenant_id"], project_id=p["id"])]
    if not mine:
        seen = next((p for p in projects if caller.sees(instance["tenant_id"], p["id"])), projects[0])
        caller.require(permission, tenant_id=instance["tenant_id"], project_id=seen["id"])
    return mine


def served_by(conn: psycopg.Connection, instance: dict, caller: Principal, permission: str) -> bool:
    """Whether the caller holds `permission` in some project the instance serves (no error)."""
    return any(caller.permits(permission, tenant_id=instance["tenant_id"], project_id=p["id"])
               for p in attached_projects(conn, instance))

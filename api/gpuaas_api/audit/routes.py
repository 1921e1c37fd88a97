from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from ..common import Page, Token, decode_cursor
from ..deps import DB, Caller, CursorParam, LimitParam, OptionalBreakGlassReason, router
from ..iam.service import get_project, get_tenant
from . import service

api = router("audit")


class AuditEntry(BaseModel):
    id: int
    occurred_at: datetime
    correlation_id: str
    actor_kind: str
    actor_id: UUID | None
    action: str
    target_kind: str
    target_id: str | None
    break_glass: bool
    reason: str
    before: Any
    after: Any
    tenant_id: UUID | None
    project_id: UUID | None
    app_slug: str | None
    app_instance_id: UUID | None
    operating_mode: str | None
    control_plane_scope: str | None
    runtime_backend: str | None


@api.get("/v1/audit", operation_id="audit_list", response_model=Page[AuditEntry])
def list_audit(caller: Caller, db: DB, tenant_id: UUID | None = None, project_id: UUID | None = None,
               action: Token | None = None, correlation_id: Token | None = None,
               app_instance_id: UUID | None = None, actor_id: UUID | None = None, break_glass: bool | None = None,
               cursor: CursorParam = None, limit: LimitParam = 100, reason: OptionalBreakGlassReason = None):
    """Audit log, newest first. Scope: a project (project_id), a tenant (tenant_id) or everything
    (neither; platform scope). Tenant and project admins read their scope's rows. The platform reads
    its own rows (see audit.service.list_audit); tenants' rows only through break-glass: with
    platform.break_glass and an X-Break-Glass-Reason header, a read that is itself audited."""
    with db.transaction() as conn:
        if project_id is not None:
            scope = {"tenant_id": get_project(conn, project_id)["tenant_id"], "project_id": project_id}
        elif tenant_id is not None:
            scope = {"tenant_id": get_tenant(conn, tenant_id)["id"]}
        else:
            scope = {}
        platform_only = False
        if scope and caller.permits("audit.read", **scope):
            pass
        elif reason is not None and caller.permits("platform.break_glass"):
            service.record(conn, caller, "audit.read", "audit_log", None, break_glass=True, reason=reason,
                           after={"tenant_id": tenant_id, "project_id": project_id}, context=scope)
        else:
            caller.require("audit.platform.read", **scope)
            platform_only = True
        items, nxt = service.list_audit(
            conn, tenant_id=tenant_id, project_id=project_id, before=decode_cursor(cursor), limit=limit,
            platform_only=platform_only,
            filters={"action": action, "correlation_id": correlation_id, "app_instance_id": app_instance_id,
                     "actor_id": actor_id, "break_glass": break_glass})
    return {"items": items, "next_cursor": nxt}

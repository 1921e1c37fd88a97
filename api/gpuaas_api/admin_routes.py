"""Platform break-glass: the only routes where platform operators reach tenant data. Each call needs
platform.break_glass and an X-Break-Glass-Reason header, and writes an audit row marked break_glass."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import Query

from . import docs, errors
from .audit import service as audit
from .common import Page, decode_cursor
from .deps import DB, BreakGlassReason, Caller, CursorParam, LimitParam, router
from .instances import service as instances
from .instances.schemas import Instance, InstanceStatus, StatusChange

api = router("admin (break-glass)")


@api.get("/v1/admin/instances", operation_id="admin_instances_list", response_model=Page[Instance])
def list_all_instances(caller: Caller, db: DB, reason: BreakGlassReason, tenant_id: UUID | None = None,
                       project_id: UUID | None = None, status: Annotated[InstanceStatus | None, Query()] = None,
                       cursor: CursorParam = None, limit: LimitParam = 50):
    """Every instance of every tenant (break-glass; audited), newest first."""
    caller.require("platform.break_glass")
    with db.transaction() as conn:
        items, nxt = instances.list_instances(conn, tenant_id=tenant_id, project_id=project_id, status=status,
                                              before=decode_cursor(cursor), limit=limit)
        audit.record(conn, caller, "admin.instances.list", "app_instance", None, break_glass=True, reason=reason,
                     after={"tenant_id": tenant_id, "project_id": project_id, "status": status, "count": len(items)},
                     context={"tenant_id": tenant_id, "project_id": project_id})
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/admin/instances/{instance_id}", operation_id="admin_instances_get", response_model=Instance)
def get_any_instance(instance_id: UUID, caller: Caller, db: DB, reason: BreakGlassReason):
    """Any instance by id (break-glass; audited)."""
    caller.require("platform.break_glass")
    with db.transaction() as conn:
        row = instances.get_instance_view(conn, instance_id, include_deleted=True)
        audit.record(conn, caller, "admin.instances.read", "app_instance", instance_id, break_glass=True,
                     reason=reason, context=audit.instance_context(row))
    return row


@api.post("/v1/admin/instances/{instance_id}/transitions", operation_id="admin_instances_transition",
          responses=errors.responses("illegal_transition", "unknown_state"),
          openapi_extra=docs.example({"to": "failed", "reason": "incident 77: hosts lost, runtime gone"}),
          response_model=Instance)
def force_transition(instance_id: UUID, body: StatusChange, caller: Caller, db: DB, reason: BreakGlassReason):
    """Move a stuck instance along a legal edge (e.g. starting → failed). Never an illegal one."""
    caller.require("platform.break_glass")
    with db.transaction() as conn:
        instances.transition_instance(conn, instance_id, body.to, reason=f"{body.reason} (break-glass: {reason})",
                                      actor=caller, break_glass=True)
        return instances.get_instance_view(conn, instance_id)

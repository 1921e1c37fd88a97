"""Audit log (who did what privileged thing, before/after, why) and the per-instance event timeline.
Both rows carry the same correlation context. Callable from HTTP handlers and from workers."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from .. import correlation
from ..common import page_of
from ..iam.auth import Principal

CONTEXT_FIELDS = ("tenant_id", "project_id", "app_slug", "app_instance_id", "operating_mode",
                  "control_plane_scope", "runtime_backend")


def instance_context(instance: dict) -> dict[str, Any]:
    """The correlation context of an app instance row, for audit rows and events."""
    return {"tenant_id": instance["tenant_id"], "project_id": instance["project_id"],
            "app_slug": instance["app_slug"], "app_instance_id": instance["id"],
            "operating_mode": instance["operating_mode"],
            "control_plane_scope": instance["control_plane_scope"],
            "runtime_backend": instance["runtime_backend"]}


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value, dumps=_dumps)


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, default=str)


def record(conn: psycopg.Connection, actor: Principal, action: str, target_kind: str,
           target_id: Any = None, *, before: Any = None, after: Any = None, reason: str = "",
           break_glass: bool = False, context: dict[str, Any] | None = None,
           correlation_id: str | None = None) -> int:
    ctx = {k: None for k in CONTEXT_FIELDS} | (context or {})
    row = conn.execute(
        """INSERT INTO audit_log (correlation_id, actor_kind, actor_id, action, target_kind, target_id,
               break_glass, reason, before, after, tenant_id, project_id, app_slug, app_instance_id,
               operating_mode, control_plane_scope, runtime_backend)
           VALUES (%(cid)s, %(ak)s, %(aid)s, %(action)s, %(tk)s, %(tid)s, %(bg)s, %(reason)s, %(before)s,
               %(after)s, %(tenant_id)s, %(project_id)s, %(app_slug)s, %(app_instance_id)s,
               %(operating_mode)s, %(control_plane_scope)s, %(runtime_backend)s)
           RETURNING id""",
        {"cid": correlation_id or correlation.current(), "ak": actor.kind, "aid": actor.id,
         "action": action, "tk": target_kind, "tid": None if target_id is None else str(target_id),
         "bg": break_glass, "reason": reason, "before": _json(before), "after": _json(after), **ctx},
    ).fetchone()
    return row["id"]


def append_event(conn: psycopg.Connection, instance: dict, event_type: str,
                 payload: dict[str, Any] | None = None, *, member_id: UUID | None = None,
                 correlation_id: str | None = None) -> dict:
    """Append one event to an instance's timeline. Payloads must never hold secret values."""
    return conn.execute(
        """INSERT INTO instance_events (app_instance_id, member_id, type, payload, correlation_id,
               tenant_id, project_id, app_slug, operating_mode, control_plane_scope, runtime_backend)
           VALUES (%(app_instance_id)s, %(member_id)s, %(type)s, %(payload)s, %(cid)s, %(tenant_id)s,
               %(project_id)s, %(app_slug)s, %(operating_mode)s, %(control_plane_scope)s,
               %(runtime_backend)s)
           RETURNING *""",
        {**instance_context(instance), "member_id": member_id, "type": event_type,
         "payload": _json(payload or {}), "cid": correlation_id or correlation.current()},
    ).fetchone()


def list_events(conn: psycopg.Connection, instance_id: UUID, *, after: int | None, limit: int,
                event_type: str | None = None, member_id: UUID | None = None,
                correlation_id: str | None = None) -> tuple[list[dict], str | None]:
    """Timeline in order of occurrence (ascending id), keyset-paginated."""
    rows = conn.execute(
        """SELECT * FROM instance_events
            WHERE app_instance_id = %(iid)s AND id > %(after)s
              AND (%(type)s::text IS NULL OR type = %(type)s)
              AND (%(member)s::uuid IS NULL OR member_id = %(member)s)
              AND (%(cid)s::text IS NULL OR correlation_id = %(cid)s)
            ORDER BY id LIMIT %(limit)s""",
        {"iid": instance_id, "after": after or 0, "type": event_type, "member": member_id,
         "cid": correlation_id, "limit": limit + 1},
    ).fetchall()
    return page_of(rows, limit, key="id")


def list_audit(conn: psycopg.Connection, *, tenant_id: UUID | None, project_id: UUID | None,
               before: int | None, limit: int, filters: dict[str, Any],
               platform_only: bool = False) -> tuple[list[dict], str | None]:
    """Newest first, keyset-paginated on id. platform_only: only the platform's own rows (no tenant
    context, break-glass, or an action by a current platform principal); the rest is tenant data:
    what tenants asked for, and what the workers did for them."""
    rows = conn.execute(
        """SELECT * FROM audit_log
            WHERE (NOT %(platform_only)s OR tenant_id IS NULL OR break_glass
                   OR (actor_kind, actor_id) IN (SELECT principal_kind, principal_id FROM role_bindings
                                                  WHERE scope_kind = 'platform'))
              AND (%(tenant)s::uuid IS NULL OR tenant_id = %(tenant)s)
              AND (%(project)s::uuid IS NULL OR project_id = %(project)s)
              AND (%(before)s::bigint IS NULL OR id < %(before)s)
              AND (%(action)s::text IS NULL OR action = %(action)s)
              AND (%(cid)s::text IS NULL OR correlation_id = %(cid)s)
              AND (%(instance)s::uuid IS NULL OR app_instance_id = %(instance)s)
              AND (%(actor)s::uuid IS NULL OR actor_id = %(actor)s)
              AND (%(break_glass)s::boolean IS NULL OR break_glass = %(break_glass)s)
            ORDER BY id DESC LIMIT %(limit)s""",
        {"platform_only": platform_only, "tenant": tenant_id, "project": project_id, "before": before,
         "limit": limit + 1,
         "action": filters.get("action"), "cid": filters.get("correlation_id"),
         "instance": filters.get("app_instance_id"), "actor": filters.get("actor_id"),
         "break_glass": filters.get("break_glass")},
    ).fetchall()
    return page_of(rows, limit, key="id")

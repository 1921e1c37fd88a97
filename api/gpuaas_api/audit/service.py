"""Audit log (who did what privileged thing, before/after, why) and the per-instance event timeline.
Both rows carry the same correlation context. Callable from HTTP handlers and from workers."""

from __future__ import annotations

from dataclasses import dataclass
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


def jsonb(value: Any) -> Jsonb | None:
    """A JSON column's value; what json cannot encode (UUIDs, datetimes) is stored as its str."""
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
         "bg": break_glass, "reason": reason, "before": jsonb(before), "after": jsonb(after), **ctx},
    ).fetchone()
    return row["id"]


def append_event(conn: psycopg.Connection, instance: dict, event_type: str,
                 payload: dict[str, Any] | None = None, *, member_id: UUID | None = None,
                 correlation_id: str | None = None) -> dict:
    """Append one event to an instance's timeline. Payloads must never hold secret values."""
    # The transaction holds its id before it draws the event's: a follower that sees it in flight knows it may
    # still commit an event with a lower id than those already visible (followed_events).
    conn.execute("SELECT pg_current_xact_id()")
    return conn.execute(
        """INSERT INTO instance_events (app_instance_id, member_id, type, payload, correlation_id,
               tenant_id, project_id, app_slug, operating_mode, control_plane_scope, runtime_backend)
           VALUES (%(app_instance_id)s, %(member_id)s, %(type)s, %(payload)s, %(cid)s, %(tenant_id)s,
               %(project_id)s, %(app_slug)s, %(operating_mode)s, %(control_plane_scope)s,
               %(runtime_backend)s)
           RETURNING *""",
        {**instance_context(instance), "member_id": member_id, "type": event_type,
         "payload": jsonb(payload or {}), "cid": correlation_id or correlation.current()},
    ).fetchone()


def list_events(conn: psycopg.Connection, instance_id: UUID, *, after: int | None, limit: int,
                event_type: str | None = None, member_id: UUID | None = None,
                correlation_id: str | None = None, upto: int | None = None) -> tuple[list[dict], str | None]:
    """Timeline in order of occurrence (ascending id), keyset-paginated; `upto`: ids up to this one only."""
    rows = conn.execute(
        """SELECT * FROM instance_events
            WHERE app_instance_id = %(iid)s AND id > %(after)s
              AND (%(upto)s::bigint IS NULL OR id <= %(upto)s)
              AND (%(type)s::text IS NULL OR type = %(type)s)
              AND (%(member)s::uuid IS NULL OR member_id = %(member)s)
              AND (%(cid)s::text IS NULL OR correlation_id = %(cid)s)
            ORDER BY id LIMIT %(limit)s""",
        {"iid": instance_id, "after": after or 0, "upto": upto, "type": event_type, "member": member_id,
         "cid": correlation_id, "limit": limit + 1},
    ).fetchall()
    return page_of(rows, limit, key="id")


@dataclass
class Follow:
    """Where a follower of one timeline stands: every event up to `settled` is final (no lower id can still
    commit); `held` is a later id read before the transaction id `barrier` was drawn, final once every
    transaction with an id up to `barrier` has ended."""
    after: int
    settled: int = 0
    held: int = 0
    barrier: str | None = None


def followed_events(db, instance_id: UUID, follow: Follow, limit: int = 200) -> list[dict]:
    """The next events of the timeline for a follower that must never miss one (the event stream). Ids are
    drawn in insert order but become visible in commit order: an event read while another writing transaction
    was in flight may be followed by a lower id when that one commits. A writer holds its transaction id before
    it draws an event id (append_event), so every writer of an id up to the last one read holds a lower
    transaction id than one drawn after the read (the barrier); once no transaction up to the barrier is in
    flight, the events up to that id are read again, complete. With no other writer in flight that is at once.
    Advances `follow.after`."""
    if follow.after >= follow.settled and follow.barrier is None:
        with db.transaction() as conn:
            rows = list_events(conn, instance_id, after=follow.after, limit=limit)[0]
        if not rows:
            return []
        with db.transaction() as conn:
            barrier = conn.execute("SELECT pg_current_xact_id()::text AS x").fetchone()["x"]
            conn.rollback()  # the id is all it wanted: nothing to commit
        follow.held, follow.barrier = rows[-1]["id"], barrier
    if follow.barrier is not None:
        with db.transaction() as conn:
            if not conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot()) > %s::xid8 AS ended",
                                (follow.barrier,)).fetchone()["ended"]:
                return []
        follow.settled, follow.barrier = max(follow.settled, follow.held), None
    with db.transaction() as conn:  # a snapshot taken after those writers ended: their events are in it
        rows = list_events(conn, instance_id, after=follow.after, upto=follow.settled, limit=limit)[0]
    if rows:
        follow.after = rows[-1]["id"]
    return rows


def list_audit(conn: psycopg.Connection, *, tenant_id: UUID | None, project_id: UUID | None,
               before: int | None, limit: int, filters: dict[str, Any],
               platform_only: bool = False) -> tuple[list[dict], str | None]:
    """Newest first, keyset-paginated on id. platform_only: only the platform's own rows (no tenant
    context, break-glass, or an action by a current platform principal outside any tenant; a tenant's user with
    a platform binding, a platform publisher, acts in its tenant as one of the tenant's); the rest is tenant data:
    what tenants asked for, and what the workers did for them."""
    rows = conn.execute(
        """SELECT * FROM audit_log
            WHERE (NOT %(platform_only)s OR tenant_id IS NULL OR break_glass
                   OR (actor_kind, actor_id) IN (SELECT 'user', b.principal_id FROM role_bindings b
                                                   JOIN users u ON u.id = b.principal_id AND u.tenant_id IS NULL
                                                  WHERE b.scope_kind = 'platform' AND b.principal_kind = 'user'))
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

"""Audit log (who did what privileged thing, before/after, why) and the per-instance event timeline.
Both rows carry the same correlation context. Callable from HTTP handlers and from workers."""

from __future__ import annotations

from dataclasses import dataclass, field
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
         "payload": _json(payload or {}), "cid": correlation_id or correlation.current()},
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
    commit); `unsettled` is a later id read while the writing transactions `in_flight` had not ended."""
    after: int
    settled: int = 0
    unsettled: int = 0
    in_flight: list[str] = field(default_factory=list)


def followed_events(db, instance_id: UUID, follow: Follow, limit: int = 200) -> list[dict]:
    """The next events of the timeline for a follower that must never miss one (the event stream). Ids are
    drawn in insert order but become visible in commit order: an event read while another writing transaction
    was in flight may be followed by a lower id when that one commits. So such a read is held back until every
    transaction in flight at that read has ended, and the events up to it are then read again, complete. With no
    writer in flight (the usual case) events go out as soon as they are read. Advances `follow.after`."""
    if follow.in_flight:
        with db.transaction() as conn:
            ended = not conn.execute("SELECT 1 FROM unnest(%s::text[]) x WHERE pg_xact_status(x::xid8) = "
                                     "'in progress' LIMIT 1", (follow.in_flight,)).fetchone()
        if not ended:
            return []
        follow.settled, follow.in_flight = max(follow.settled, follow.unsettled), []
    if follow.after < follow.settled:
        with db.transaction() as conn:  # a snapshot taken after those writers ended: their events are in it
            rows = list_events(conn, instance_id, after=follow.after, upto=follow.settled, limit=limit)[0]
    else:
        with db.transaction() as conn:
            # One snapshot for both reads: the writers in flight are those the events were read beside.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            rows = list_events(conn, instance_id, after=follow.after, limit=limit)[0]
            writers = [r["xid"] for r in conn.execute(
                "SELECT x::text AS xid FROM pg_snapshot_xip(pg_current_snapshot()) x").fetchall()]
        if rows and writers:
            follow.unsettled, follow.in_flight = rows[-1]["id"], writers
            return []
        if rows:
            follow.settled = rows[-1]["id"]
    if rows:
        follow.after = rows[-1]["id"]
    return rows


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

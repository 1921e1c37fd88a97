"""Promotion gate records (promotion_gates, migration 0022; docs/control-service.md "Promotion gates"): the
staging gate of a collection artifact, started by its publisher and run by the gate worker (gate_worker.py), and
the listing of every gate (smoke gates: smoke.py)."""

from __future__ import annotations

from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from .. import correlation
from ..audit import service as audit
from ..errors import ApiError, conflict, not_found
from ..iam.auth import Principal
from . import events, scope, service, smoke


def get_gate(conn: psycopg.Connection, gate_id: UUID) -> dict:
    row = conn.execute("SELECT * FROM promotion_gates WHERE id = %s", (gate_id,)).fetchone()
    if row is None:
        raise not_found("gate", gate_id)
    return row


def list_gates(conn: psycopg.Connection, slug: str, *, after: int, limit: int, artifact_id: UUID | None = None,
               version: str | None = None, kind: str | None = None, status: str | None = None) -> list[dict]:
    """The app's gates after `seq` `after`, oldest first, filtered (limit + 1 rows: the caller pages them)."""
    return conn.execute(
        """SELECT g.* FROM promotion_gates g LEFT JOIN app_versions v ON v.id = g.app_version_id
            WHERE g.app_slug = %s AND g.seq > %s AND (%s::uuid IS NULL OR g.artifact_id = %s)
              AND (%s::text IS NULL OR v.version = %s) AND (%s::text IS NULL OR g.kind = %s)
              AND (%s::text IS NULL OR g.status = %s)
            ORDER BY g.seq LIMIT %s""",
        (slug, after, artifact_id, artifact_id, version, version, kind, kind, status, status, limit + 1),
    ).fetchall()


def staging_required(artifact: dict, checks) -> bool:
    """Whether moving this artifact draft -> staged is the staging gate's: a collection build, while the operator
    names staging checks."""
    return artifact["kind"] == "collection" and bool(checks)


def start_staging(conn: psycopg.Connection, actor: Principal, artifact_id: UUID, reason: str,
                  checks) -> tuple[dict, bool]:
    """Queue the staging gate of a draft collection artifact (the caller may publish in its catalog): (the gate,
    True), or (the open one, False) when one is queued or running. The gate worker runs it."""
    artifact = service.get_artifact(conn, artifact_id, lock=True)
    open_gate = conn.execute("""SELECT * FROM promotion_gates WHERE kind = 'staging' AND artifact_id = %s
                                   AND status IN ('queued', 'running')""", (artifact_id,)).fetchone()
    if open_gate is not None:
        return open_gate, False
    if not staging_required(artifact, checks) or artifact["status"] != "draft":
        raise conflict("gate_not_applicable", f"a staging gate runs on a draft collection artifact while the "
                       f"platform names staging checks; this is a {artifact['status']} {artifact['kind']} artifact",
                       kind=artifact["kind"], status=artifact["status"], checks=list(checks))
    gate = conn.execute(
        """INSERT INTO promotion_gates (kind, app_slug, artifact_id, reason, correlation_id, requested_by_kind,
               requested_by, checks)
           VALUES ('staging', %s, %s, NULL, %s, %s, %s, %s) RETURNING *""",
        (artifact["app_slug"], artifact_id, correlation.current(), actor.kind, actor.id,
         Jsonb([{"name": name, "status": "queued"} for name in checks])),
    ).fetchone()
    app = {"slug": artifact["app_slug"], "tenant_id": artifact["app_tenant_id"]}
    audit.record(conn, actor, "apps.catalog.gate.start", "promotion_gate", gate["id"],
                 after={"kind": "staging", "artifact_id": artifact_id, "digest": artifact["digest"],
                        "checks": list(checks)}, reason=reason,
                 context=service._context(artifact["app_slug"], artifact["app_tenant_id"]))
    events.append(conn, app, "gate.started", {"kind": "staging", "checks": list(checks), "reason": reason,
                                              "requested_by": {"kind": actor.kind, "id": actor.id,
                                                               "name": actor.name}},
                  artifact_id=artifact_id, gate_id=gate["id"], correlation_id=gate["correlation_id"])
    return gate, True


def may_publish(caller: Principal, tenant_id: UUID | None) -> bool:
    try:
        scope.require_publish(caller, tenant_id)
    except ApiError:
        return False
    return True


def for_reader(caller: Principal, gate: dict, app_tenant_id: UUID | None) -> dict:
    """A gate as `caller` reads it. A staging gate's findings, tool output and requester are the app's publishers'
    (a build's content is readable only in the scopes that uploaded it); everyone else who sees the app reads the
    outcome: each check's name and status. A smoke gate: smoke.for_reader."""
    if gate["kind"] == "smoke":
        return smoke.for_reader(caller, gate)
    if may_publish(caller, app_tenant_id):
        return gate
    return gate | {"checks": [{"name": c["name"], "status": c["status"]} for c in gate["checks"]],
                   "reason": gate["reason"] and "the staging checks failed", "requested_by": None}


def event_for_reader(caller: Principal, event: dict, app_tenant_id: UUID | None) -> dict:
    """A catalog event as `caller` reads it: as for_reader shows its gate."""
    payload = event["payload"] or {}
    if payload.get("kind") == "smoke":
        return smoke.event_for_reader(caller, event)
    if may_publish(caller, app_tenant_id):
        return event
    outcome = {k: payload[k] for k in ("kind", "gates", "from", "to", "artifact_status") if k in payload}
    if "checks" in payload:
        outcome["checks"] = [{"name": c["name"], "status": c.get("status")} if isinstance(c, dict) else c
                             for c in payload["checks"]]
    return event | {"payload": outcome}

"""Smoke gates (docs/control-service.md "Smoke runs and canary instances"): a draft version becomes canary only
after a deploy and a decommission of it on allocations the publisher names, through the ordinary operation path.

The request (start) creates the smoke instance and queues its deploy as the publisher, so every check of an
instance create and a deploy in that project (permission, entitlement, policy, allocations, quotas, parameters
against the version's schema) is made there and then. The gate worker's tick (advance) does the rest: once the
deploy ended it queues the decommission (after a failed deploy too: it cleans up what the deploy left), and once
that ended it records the outcome and, on a pass, moves the version draft -> canary as the publisher. Every
operation carries the gate's correlation id, so the catalog's events and the instance's timeline share it."""

from __future__ import annotations

import logging
import re
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from .. import correlation
from ..db import Database
from ..errors import ApiError
from ..iam.auth import Principal
from ..iam.service import get_project
from ..instances import service as instances
from ..instances.schemas import InstanceCreate
from ..operations import service as operations
from ..operations.kinds import KINDS
from ..operations.rules import TERMINAL
from . import events, service
from .rules import VERSION_TRANSITIONS, check_transition

log = logging.getLogger(__name__)

# What a smoke run does in the project, as the publisher: create an instance, deploy it, decommission it.
PERMISSIONS = tuple(dict.fromkeys(("apps.instance.create", *KINDS["deploy"].permissions,
                                   *KINDS["decommission"].permissions)))
# What a reader who does not read instances in the smoke run's project is told of a failure instead of its reason.
HIDDEN_REASON = "the smoke run failed; what ran, and why it failed, is read in the project it ran in"
# What such a reader sees of a smoke gate's event payload.
OUTCOME_FIELDS = ("kind", "version", "promoted")


def _reads_project(caller: Principal, ran: dict | None) -> bool:
    return bool(ran and ran.get("project_id")) and caller.permits(
        "apps.instance.read", tenant_id=UUID(ran["tenant_id"]), project_id=UUID(ran["project_id"]))


def for_reader(caller: Principal, gate: dict) -> dict:
    """A gate as `caller` reads it. What a smoke run ran belongs to the project it ran in (its ids, the instance's
    name, the run's reason, which may name hosts, and who asked): shown to callers who read instances there, the
    publisher among them, not to everyone who sees the app in the catalog (a platform app's: every tenant), who
    read the outcome."""
    if gate["kind"] != "smoke" or _reads_project(caller, gate["smoke"]):
        return gate
    return gate | {"smoke": None, "reason": gate["reason"] and HIDDEN_REASON, "requested_by": None}


def event_for_reader(caller: Principal, event: dict) -> dict:
    """A catalog event as `caller` reads it: a smoke gate's, as for_reader shows the gate."""
    payload = event["payload"] or {}
    if payload.get("kind") != "smoke" or _reads_project(caller, payload):
        return event
    return event | {"payload": {k: payload[k] for k in OUTCOME_FIELDS if k in payload}}


def get_gate(conn: psycopg.Connection, gate_id: UUID, *, lock: bool = False) -> dict | None:
    sql = "SELECT * FROM promotion_gates WHERE id = %s" + (" FOR UPDATE SKIP LOCKED" if lock else "")  # noqa: S608
    return conn.execute(sql, (gate_id,)).fetchone()


def open_gate(conn: psycopg.Connection, version_id: UUID) -> dict | None:
    return conn.execute("""SELECT * FROM promotion_gates WHERE kind = 'smoke' AND app_version_id = %s
                              AND status IN ('queued', 'running')""", (version_id,)).fetchone()


def instance_name(version: str, gate_id: UUID) -> str:
    """smoke-<version>-<gate id's first 8>: a tenant sees in its instance list what the instance is."""
    slug = re.sub(r"[^a-z0-9]+", "-", version.lower()).strip("-")[:40].strip("-")
    return f"smoke-{slug}-{str(gate_id)[:8]}"


def start(conn: psycopg.Connection, actor: Principal, app: dict, version: dict, body, *, max_instances: int,
          operation_settings) -> dict:
    """Start the smoke gate of a draft version (the caller already may publish in the app's catalog), or return
    the open one. Creates the smoke instance and queues its deploy as the caller: refusals are the ones an
    instance create and a deploy in that project give."""
    conn.execute("SELECT 1 FROM app_versions WHERE id = %s FOR UPDATE", (version["id"],))
    existing = open_gate(conn, version["id"])
    if existing:  # another publisher's, maybe: as that caller reads it
        return for_reader(actor, existing)
    version = service.get_version_by_id(conn, version["id"])
    check_transition(VERSION_TRANSITIONS, "version", version["status"], "canary")
    service.check_version_artifacts(version, "canary")
    project = get_project(conn, body.project_id)
    for key in PERMISSIONS:
        actor.require(key, tenant_id=project["tenant_id"], project_id=project["id"])
    cid = correlation.current()
    requested = {"project_id": str(project["id"]), "tenant_id": str(project["tenant_id"]),
                 "allocation_ids": [str(a) for a in body.allocation_ids],
                 "topology": [r.model_dump() for r in body.topology], "reason": body.reason,
                 "requested_by_name": actor.name}
    gate = conn.execute(
        """INSERT INTO promotion_gates (kind, app_slug, artifact_id, app_version_id, status, smoke, correlation_id,
               requested_by_kind, requested_by, started_at)
           VALUES ('smoke', %s, %s, %s, 'running', %s, %s, %s, %s, now()) RETURNING *""",
        (app["slug"], version["artifact_id"], version["id"], Jsonb(requested), cid, actor.kind, actor.id),
    ).fetchone()
    instance = instances.create_instance(conn, actor, project, InstanceCreate(
        name=instance_name(version["version"], gate["id"]), app_slug=app["slug"], version=version["version"],
        allocation_ids=body.allocation_ids, topology=[r.model_dump() for r in body.topology],
        parameters=body.parameters),
        max_instances=max_instances, smoke_gate_id=gate["id"])
    deploy = operations.accept(conn, operation_settings, actor, instance["id"], "deploy", {}, smoke_gate=True)
    smoke = requested | {"instance_id": str(instance["id"]), "instance_name": instance["name"],
                         "operations": [_outcome(deploy)]}
    gate = _update(conn, gate["id"], smoke=smoke)
    events.append(conn, app, "gate.started", {"kind": "smoke", "version": version["version"],
                                              "instance_id": smoke["instance_id"], "operations": smoke["operations"],
                                              "project_id": smoke["project_id"], "tenant_id": smoke["tenant_id"],
                                              "allocation_ids": smoke["allocation_ids"]},
                  artifact_id=version["artifact_id"], app_version_id=version["id"], gate_id=gate["id"],
                  correlation_id=cid)
    return gate


def _outcome(op: dict) -> dict:
    """What the gate records of one operation: no request bodies (they may carry parameters)."""
    error = op.get("error") or {}
    return {"id": str(op["id"]), "kind": op["kind"], "status": op["status"],
            **({"reason": error.get("message") or error.get("code")} if error else {})}


def _update(conn: psycopg.Connection, gate_id: UUID, **columns) -> dict:
    sets = ", ".join(f"{k} = %s" for k in columns)
    values = [Jsonb(v) if k == "smoke" else v for k, v in columns.items()]
    return conn.execute(f"UPDATE promotion_gates SET {sets} WHERE id = %s RETURNING *",  # noqa: S608 - our names
                        (*values, gate_id)).fetchone()


def requester(gate: dict) -> Principal:
    """The publisher who started the gate, as the actor of what the worker does for it (audit rows, the
    operations' requested_by). Its permissions were checked when it asked."""
    return Principal(kind=gate["requested_by_kind"], id=gate["requested_by"],
                     name=(gate["smoke"] or {}).get("requested_by_name") or "publisher")


def advance(database: Database, settings) -> int:
    """Drive every open smoke gate one step (the gate worker's tick; `settings`: OperationSettings). Quick when
    none is open; a gate another worker holds is skipped (SKIP LOCKED); a gate that breaks is recorded failed
    and does not stop the others. Returns how many gates moved."""
    with database.transaction() as conn:
        ids = [r["id"] for r in conn.execute(
            "SELECT id FROM promotion_gates WHERE kind = 'smoke' AND status = 'running' ORDER BY seq").fetchall()]
    moved = 0
    for gate_id in ids:
        try:
            with database.transaction() as conn:
                gate = get_gate(conn, gate_id, lock=True)
                if gate is not None and gate["status"] == "running":
                    with correlation.correlated(gate["correlation_id"]):
                        moved += _step(conn, gate, settings)
        except psycopg.OperationalError:
            raise  # the database is away: the gate is untouched, and the next tick takes it up again
        except Exception as exc:  # noqa: BLE001 - one broken gate must not stop the others
            log.exception("smoke gate %s failed to advance", gate_id)
            moved += _break(database, gate_id, settings, exc)
    return moved


def _break(database: Database, gate_id: UUID, settings, exc: Exception) -> int:
    """Fail a gate whose step raised. Its smoke instance may be deployed on the project's hosts: its decommission
    is queued (as the gate would have queued it), so a draft version is not left running there."""
    with database.transaction() as conn:
        gate = get_gate(conn, gate_id, lock=True)
        if gate is None or gate["status"] != "running":
            return 0
        smoke = dict(gate["smoke"] or {})
        reason = f"the smoke gate could not go on: {type(exc).__name__}"
        if smoke.get("instance_id") and len(smoke.get("operations", [])) == 1:
            try:
                with conn.transaction(), correlation.correlated(gate["correlation_id"]):
                    op = operations.accept(conn, settings, requester(gate), UUID(smoke["instance_id"]),
                                           "decommission", {}, smoke_gate=True)
                smoke["operations"] = [*smoke["operations"], _outcome(op)]
                reason += "; its instance's decommission was queued"
            except ApiError as refused:
                reason += f"; its instance's decommission was refused: {refused.message}"
        return _finish(conn, gate, smoke, passed=False, reason=reason)


def _step(conn: psycopg.Connection, gate: dict, settings) -> int:
    smoke = dict(gate["smoke"])
    ran = [operations.get(conn, UUID(o["id"])) for o in smoke["operations"]]
    if ran[-1]["status"] not in TERMINAL:
        return 0
    smoke["operations"] = [_outcome(o) for o in ran]
    deploy = ran[0]
    if len(ran) == 1:
        # The deploy ended: decommission, whatever its outcome (a failed deploy may have left things on hosts).
        try:
            with conn.transaction():
                op = operations.accept(conn, settings, requester(gate), UUID(smoke["instance_id"]), "decommission", {},
                                       smoke_gate=True)
        except ApiError as refused:  # e.g. a deploy canceled before it started: nothing ran, nothing to clean up
            # Nothing ran: the instance (of a draft version) goes, so no one can deploy it later.
            with conn.transaction():
                instances.delete_instance(conn, requester(gate), UUID(smoke["instance_id"]))
            smoke["instance_deleted"] = True
            return _finish(conn, gate, smoke, passed=False,
                           reason=f"deploy {deploy['status']}; decommission refused: {refused.message}")
        smoke["operations"].append(_outcome(op))
        _update(conn, gate["id"], smoke=smoke)
        return 1
    decommission = ran[1]
    if decommission["status"] == "succeeded":
        # Torn down: the instance's record goes too (it no longer counts against the project's instance quota).
        # Its operations and timeline stay readable, and the gate keeps their ids.
        with conn.transaction():
            instances.delete_instance(conn, requester(gate), UUID(smoke["instance_id"]))
        smoke["instance_deleted"] = True
    if deploy["status"] != "succeeded":
        return _finish(conn, gate, smoke, passed=False, reason=f"deploy {deploy['status']}: "
                       + (smoke["operations"][0].get("reason") or "no reason recorded"))
    if decommission["status"] != "succeeded":
        return _finish(conn, gate, smoke, passed=False, reason=f"decommission {decommission['status']}: "
                       + (smoke["operations"][1].get("reason") or "no reason recorded"))
    return _finish(conn, gate, smoke, passed=True, reason=None)


def _finish(conn: psycopg.Connection, gate: dict, smoke: dict, *, passed: bool, reason: str | None) -> int:
    """Record the outcome and its event; a pass moves the version draft -> canary as the requester (if the version
    moved meanwhile, or its artifacts did, the refusal is recorded and the version stays where it is)."""
    version = service.get_version_by_id(conn, gate["app_version_id"])
    if passed:
        try:
            with conn.transaction():
                service.transition_version(conn, requester(gate), version["app_slug"], version["version"], "canary",
                                           f"smoke gate {gate['id']} passed")
            smoke["promoted"] = True
        except ApiError as refused:
            smoke["promoted"] = False
            smoke["promotion_refused"] = refused.message
    _update(conn, gate["id"], status="passed" if passed else "failed", reason=reason, smoke=smoke,
            finished_at=conn.execute("SELECT now() AS t").fetchone()["t"])
    payload = {"kind": "smoke", "version": version["version"], "instance_id": smoke.get("instance_id"),
               "operations": smoke.get("operations", []), "reason": reason, "project_id": smoke.get("project_id"),
               "tenant_id": smoke.get("tenant_id")}
    if passed:
        payload["promoted"] = smoke["promoted"]
    events.append(conn, service.get_app(conn, version["app_slug"]), "gate.passed" if passed else "gate.failed",
                  payload, artifact_id=gate["artifact_id"], app_version_id=version["id"], gate_id=gate["id"],
                  correlation_id=gate["correlation_id"])
    return 1

"""Operations: accepting requests (conflicts, idempotency, audit) and the durable queue the workers
consume (claim with FOR UPDATE SKIP LOCKED, leases, heartbeats, fenced completion, recovery of
expired leases). Every function takes a connection inside the caller's transaction."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from .. import correlation, quotas
from ..audit import service as audit
from ..catalog import parameters
from ..catalog.adapter import stored_spec
from ..catalog.service import get_version_by_id
from ..common import page_of
from ..config import OperationSettings
from ..errors import conflict, not_found
from ..iam.auth import Principal
from ..instances import service as instances
from ..observability import tracing
from ..registry import credentials
from . import rules, truth
from .kinds import KINDS

log = logging.getLogger(__name__)
# Accepting an operation notifies this channel (delivered when the accepting transaction commits);
# workers LISTEN on it and claim at once instead of waiting for their next poll.
QUEUE_CHANNEL = "gpuaas_operations"


class _KeyTaken(Exception):
    """The idempotency key's unique index refused the insert: a concurrent retry won the race."""


def get(conn: psycopg.Connection, operation_id: UUID, *, lock: bool = False) -> dict:
    sql = "SELECT * FROM operations WHERE id = %s" + (" FOR UPDATE" if lock else "")  # noqa: S608 - constant
    row = conn.execute(sql, (operation_id,)).fetchone()
    if row is None:
        raise not_found("operation", operation_id)
    return row


def list_for_instance(conn: psycopg.Connection, instance_id: UUID, *, status: str | None, after: int | None,
                      limit: int) -> tuple[list[dict], str | None]:
    """Oldest first (queue order), keyset-paginated on seq."""
    rows = conn.execute(
        """SELECT * FROM operations WHERE instance_id = %(iid)s AND seq > %(after)s
              AND (%(status)s::text IS NULL OR status = %(status)s) ORDER BY seq LIMIT %(limit)s""",
        {"iid": instance_id, "after": after or 0, "status": status, "limit": limit + 1}).fetchall()
    return page_of(rows, limit)


def _by_key(conn, instance_id: UUID, actor: Principal, kind: str, member_id: UUID | None, key: str) -> dict | None:
    """The operation an Idempotency-Key names: keys are scoped to caller, route (kind) and target
    (instance, and the member of a member route), as the unique index operations_idempotency is."""
    return conn.execute("""SELECT * FROM operations WHERE instance_id = %s AND requested_by = %s AND kind = %s
                             AND target_member_id IS NOT DISTINCT FROM %s AND idempotency_key = %s""",
                        (instance_id, actor.id, kind, member_id, key)).fetchone()


def _replay(existing: dict, request: dict) -> dict:
    if existing["params"].get("request") != request:
        raise conflict("idempotency_key_reused", "this Idempotency-Key was used on this route and target with "
                       "a different request body", operation_id=str(existing["id"]))
    return existing


def accept(conn: psycopg.Connection, settings: OperationSettings, actor: Principal, instance_id: UUID, kind: str,
           request: dict[str, Any], *, member_id: UUID | None = None, idempotency_key: str | None = None,
           smoke_gate: bool = False) -> dict:
    """Queue one operation, or refuse with a 409 that says why. The instance row lock serializes every
    request for one instance, so checks and the insert see one consistent state; the unique index on
    the idempotency key is the guarantee that concurrent retries yield one operation. A smoke instance (bound to
    a draft version) runs only what its gate queues (`smoke_gate`, which no route passes), and a decommission:
    anything else would run a draft version past its gates."""
    instance = instances.get_instance(conn, instance_id, lock=True)
    if instance["smoke_gate_id"] and not smoke_gate and kind != "decommission":
        raise conflict("smoke_instance", f"this is the smoke instance of promotion gate {instance['smoke_gate_id']}: "
                       "only its gate operates it (a decommission is allowed, to clean up)",
                       gate_id=str(instance["smoke_gate_id"]))
    if idempotency_key:
        existing = _by_key(conn, instance_id, actor, kind, member_id, idempotency_key)
        if existing:
            return _replay(existing, request)
    try:
        with conn.transaction():  # savepoint: a lost idempotency race undoes the pending member too
            return _queue(conn, settings, actor, instance, kind, request, member_id, idempotency_key)
    except _KeyTaken:
        return _replay(_by_key(conn, instance_id, actor, kind, member_id, idempotency_key), request)


def _queue(conn, settings: OperationSettings, actor: Principal, instance: dict, kind: str, request: dict,
           member_id: UUID | None, idempotency_key: str | None) -> dict:
    k = KINDS[kind]
    quotas.enforce(conn, instance["project_id"], "open_operations", settings.max_open_operations_per_project)
    open_ops = conn.execute("""SELECT id, kind, status, member_ids FROM operations
                                WHERE instance_id = %s AND status IN ('queued', 'running') ORDER BY seq""",
                            (instance["id"],)).fetchall()
    for o in open_ops:
        if KINDS[o["kind"]].closes_queue:
            raise conflict("instance_decommissioning", f"a {o['kind']} is queued or running for this instance",
                           operation_id=str(o["id"]))
        if o["kind"] == kind and k.single:
            raise conflict("operation_in_progress", f"a {kind} is already queued or running",
                           operation_id=str(o["id"]))
    # Behind a queued deploy the instance counts as starting: later requests may queue behind it.
    seen_as = next((KINDS[o["kind"]].queued_as[instance["status"]] for o in open_ops
                    if instance["status"] in KINDS[o["kind"]].queued_as), instance["status"])
    rules.check_instance(kind, instance | {"status": seen_as}, accepting=True)
    cid = correlation.current()
    targets: dict[str, list[str]] = {}
    member = None
    if member_id is not None:
        member = instances.get_member(conn, instance["id"], member_id)
        busy = next((o for o in open_ops if member_id in (o["member_ids"] or [])), None)
        if busy:
            raise conflict("member_busy", f"member {member['node_name']} has a {busy['status']} {busy['kind']}",
                           operation_id=str(busy["id"]), kind=busy["kind"], status=busy["status"])
        rules.check_member(kind, member)
        if kind == "member_remove":
            _check_role_minimum(conn, instance, member, open_ops)
        targets[k.route_target] = [str(member_id)]
    params: dict[str, Any] = {"request": request}
    if k.request_check:
        params |= REQUEST_CHECKS[k.request_check](conn, instance, request)
    version_id = params.get("target_version_id") or instance["app_version_id"]
    rules.check_supported(kind, get_version_by_id(conn, UUID(str(version_id))))
    if k.creates:
        role = request.get("role") or member["role"]  # a replacement takes the role of the member it replaces
        new = instances.add_member(conn, actor, instance["id"], role, UUID(str(request["allocation_id"])),
                                   request.get("host_name"), correlation_id=cid)
        targets[k.creates] = [str(new["id"])]
    params["targets"] = targets
    member_ids = [UUID(m) for name in k.targets for m in targets.get(name, [])]
    trace_id, trace_parent = tracing.current_trace()  # the worker continues the request's trace
    op = conn.execute(
        """INSERT INTO operations (instance_id, tenant_id, project_id, kind, params, member_ids, correlation_id,
               idempotency_key, requested_by_kind, requested_by, max_attempts, timeout_s, target_member_id,
               trace_id, trace_parent)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (instance_id, requested_by, kind, target_member_id, idempotency_key)
           WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING *""",
        (instance["id"], instance["tenant_id"], instance["project_id"], kind, Jsonb(params), member_ids, cid,
         idempotency_key, actor.kind, actor.id, settings.max_attempts, settings.timeouts[kind], member_id,
         trace_id, trace_parent),
    ).fetchone()
    if op is None:
        raise _KeyTaken
    conn.execute("SELECT pg_notify(%s, %s)", (QUEUE_CHANNEL, str(op["id"])))
    audit.append_event(conn, instance, "operation.queued",
                       {"operation_id": str(op["id"]), "kind": kind, "member_ids": [str(m) for m in member_ids]})
    audit.record(conn, actor, f"apps.operation.{kind}", "operation", op["id"],
                 after={"kind": kind, "request": request, "member_ids": [str(m) for m in member_ids]},
                 context=audit.instance_context(instance))
    return op


# Checks of a request body, by the name a kind's row gives (kinds.Kind.request_check); each returns
# what the operation records besides the request.

def _check_parameters(conn, instance: dict, request: dict) -> dict:
    parameters.validate_for_version(get_version_by_id(conn, instance["app_version_id"]),
                                    (instance["parameters"] or {}) | request.get("parameters", {}))
    return {}


def _check_upgrade_target(conn, instance: dict, request: dict) -> dict:
    """Another active version of the same app, through the same gate as create."""
    v = get_version_by_id(conn, UUID(str(request["app_version_id"])))
    if v["app_slug"] != instance["app_slug"]:
        raise not_found("app_version", v["id"])
    if v["id"] == instance["app_version_id"]:
        raise conflict("already_at_version", f"the instance already runs version {v['version']}")
    instances.check_version_usable(v, canary=instance["canary"])
    instances.check_version_change(conn, instance, v)
    return {"target_version_id": str(v["id"])}


def _check_rollback_target(conn, instance: dict, request: dict) -> dict:
    if instance["previous_version_id"] is None:
        raise conflict("no_previous_version", "the instance has no previous version to roll back to")
    target = get_version_by_id(conn, instance["previous_version_id"])
    instances.check_version_usable(target, canary=instance["canary"], rollback=True)
    instances.check_version_change(conn, instance, target)
    return {"target_version_id": str(target["id"])}


def _check_role_minimum(conn, instance: dict, member: dict, open_ops: list[dict]) -> None:
    """A removal may not take the member's role below the adapter's minimum, counting the removals
    already queued or running (two accepted at once must not empty a role). A replacement keeps the
    count: it is the way to swap the last member of a role."""
    role = stored_spec(get_version_by_id(conn, instance["app_version_id"])).role(member["role"])
    leaving = {m for o in open_ops if o["kind"] == "member_remove" for m in (o["member_ids"] or [])}
    staying = conn.execute("""SELECT count(*) AS n FROM app_instance_members
                               WHERE instance_id = %s AND role = %s AND status NOT IN ('removed', 'removing')
                                 AND id <> %s AND NOT (id = ANY(%s))""",
                           (instance["id"], member["role"], member["id"], list(leaving))).fetchone()["n"]
    if role is not None and staying < role.min:
        raise conflict("role_minimum", f"removing {member['node_name']} would leave role {member['role']} with "
                       f"{staying} member(s) (with the removals already queued); it needs at least {role.min}: "
                       "replace it instead", role=member["role"], minimum=role.min, staying=staying)


REQUEST_CHECKS = {"parameters": _check_parameters, "upgrade_target": _check_upgrade_target,
                  "rollback_target": _check_rollback_target}


def cancel(conn: psycopg.Connection, actor: Principal, operation_id: UUID) -> dict:
    """Queued: canceled at once. Running: flagged; its worker kills the run's process tree (seconds)
    and records the outcome. Finished: 409."""
    op = get(conn, operation_id, lock=True)
    instance = instances.get_instance(conn, op["instance_id"], include_deleted=True)
    if op["status"] in rules.TERMINAL:
        raise conflict("operation_finished", f"the operation already {op['status']}", status=op["status"])
    audit.record(conn, actor, "apps.operation.cancel", "operation", op["id"], before={"status": op["status"]},
                 context=audit.instance_context(instance))
    if op["status"] == "queued":
        op = _set_final(conn, op["id"], "canceled", {"code": "canceled", "message": "canceled before it ran"})
        audit.append_event(conn, instance, "operation.canceled", {"operation_id": str(op["id"]), "kind": op["kind"]},
                           correlation_id=op["correlation_id"])
        truth.on_cancel_queued(conn, op)
        return op
    return conn.execute("""UPDATE operations SET cancel_requested = true, updated_at = now() WHERE id = %s
                           RETURNING *""", (op["id"],)).fetchone()


def _set_final(conn, operation_id: UUID, status: str, error: dict | None, result: dict | None = None, *,
               run_ended: bool = False) -> dict:
    """The one way an operation ends. Its runtime secrets end with it, whoever ends it: a run that
    outlives its operation (its worker was killed) must not keep pulling. `run_ended`: the caller
    knows the run is over (its own worker records the outcome); otherwise the run stays possibly live
    until a sweep on its machine proves it ended (sweep_runs)."""
    credentials.revoke(conn, operation_id)
    return conn.execute(
        """UPDATE operations SET status = %s, error = %s, result = %s, finished_at = now(), updated_at = now(),
               lease_owner = NULL, lease_expires_at = NULL,
               run_ended_at = CASE WHEN %s THEN now() ELSE run_ended_at END WHERE id = %s RETURNING *""",
        (status, Jsonb(error) if error else None, Jsonb(result) if result else None, run_ended,
         operation_id)).fetchone()


# The queue ------------------------------------------------------------------------------------------

def claim(conn: psycopg.Connection, worker_id: str, lease_seconds: float, host: str) -> dict | None:
    """Take one queued operation that heads its instance's queue (nothing older is queued or running
    on that instance), fairly across tenants: the tenant with the fewest running operations first,
    then the one whose last claim is oldest, then the oldest operation. So a burst from one tenant
    delays another tenant's operation by at most one pickup. Rows another worker is claiming right
    now are skipped; the status test on the locked row keeps two workers from taking one operation.
    `host` is the worker's machine: the run's processes live there (sweep_runs)."""
    return conn.execute(
        """WITH heads AS (
               SELECT o.id, o.tenant_id, o.seq FROM operations o
                WHERE o.status = 'queued'
                  AND NOT EXISTS (SELECT 1 FROM operations p WHERE p.instance_id = o.instance_id
                                     AND p.status IN ('queued', 'running') AND p.seq < o.seq)),
           tenants AS (
               SELECT t.tenant_id,
                      (SELECT count(*) FROM operations r WHERE r.tenant_id = t.tenant_id AND r.status = 'running')
                          AS running,
                      (SELECT max(c.claimed_at) FROM operations c WHERE c.tenant_id = t.tenant_id) AS served
                 FROM (SELECT DISTINCT tenant_id FROM heads) t),
           next AS (
               SELECT o.id FROM operations o JOIN heads h ON h.id = o.id JOIN tenants t ON t.tenant_id = h.tenant_id
                WHERE o.status = 'queued'
                ORDER BY t.running, t.served NULLS FIRST, h.seq LIMIT 1 FOR UPDATE OF o SKIP LOCKED)
           UPDATE operations o SET status = 'running', attempt = o.attempt + 1, lease_owner = %(w)s,
                  lease_expires_at = now() + make_interval(secs => %(lease)s), heartbeat_at = now(),
                  claimed_at = now(), started_at = coalesce(o.started_at, now()), updated_at = now(),
                  run_host = %(host)s, run_ended_at = NULL
             FROM next WHERE o.id = next.id RETURNING o.*""",
        {"w": worker_id, "lease": lease_seconds, "host": host}).fetchone()


def heartbeat(conn: psycopg.Connection, operation_id: UUID, worker_id: str, lease_seconds: float) -> dict | None:
    """Extend the lease; returns {cancel_requested}, or None when this worker no longer holds it. A
    lease that lapsed while the database was unreachable is still held as long as nobody recovered
    the operation (see recover_expired)."""
    return conn.execute(
        """UPDATE operations SET lease_expires_at = now() + make_interval(secs => %s), heartbeat_at = now()
            WHERE id = %s AND lease_owner = %s AND status = 'running' RETURNING cancel_requested""",
        (lease_seconds, operation_id, worker_id)).fetchone()


def finish(conn: psycopg.Connection, operation_id: UUID, worker_id: str, status: str, *,
           error: dict | None = None, result: dict | None = None) -> dict | None:
    """Record the outcome, fenced on the lease owner (not its expiry: a worker that could not reach the
    database keeps its run and records it later): None when another worker recovered the operation."""
    held = conn.execute("""SELECT 1 FROM operations WHERE id = %s AND lease_owner = %s AND status = 'running'
                           FOR UPDATE""", (operation_id, worker_id)).fetchone()
    if held is None:
        return None
    return _set_final(conn, operation_id, status, error, result, run_ended=True)


def recover_expired(conn: psycopg.Connection) -> list[dict]:
    """Operations whose worker stopped heartbeating. Playbooks are idempotent, so the run is queued
    again (attempt+1 on its next claim) until max_attempts; then it fails with the reason and the
    instance and members are set to what is known (failed). A pending cancel wins.

    An expired lease is recovered at once, even right after the database restarted: its run was stopped at
    its fence, before the lease could end, whether its worker died or could not reach the database
    (executor/worker.py, docs/operations.md "Fencing"), so waiting longer saves no run. (Waiting for the
    database to have been up a whole lease, as before fencing, let restarts closer together than a lease
    hold a dead worker's operation, and its instance's queue, for as long as they went on.) An operation
    whose recovery raises (a bug, an instance deleted under it) is failed alone; the others go on."""
    out = []
    expired = conn.execute(
        """SELECT * FROM operations WHERE status = 'running' AND lease_expires_at < now()
            ORDER BY seq FOR UPDATE SKIP LOCKED""").fetchall()
    for op in expired:
        try:
            with conn.transaction():  # a savepoint: a failed recovery leaves no half-moved statuses
                out.append(_recover(conn, op))
        except psycopg.OperationalError:
            raise
        except Exception as exc:  # noqa: BLE001 - one operation must not block the queue for every tenant
            log.exception("operation %s: recovery failed; failing it", op["id"])
            out.append(_set_final(conn, op["id"], "failed", {
                "code": "internal_error", "message": f"recovering the operation failed ({type(exc).__name__})"}))
    return out


def _recover(conn, op: dict) -> dict:
    instance = instances.get_instance(conn, op["instance_id"], include_deleted=True)
    lost = {"operation_id": str(op["id"]), "kind": op["kind"], "attempt": op["attempt"],
            "worker": op["lease_owner"], "lease_expired_at": op["lease_expires_at"].isoformat()}
    if op["cancel_requested"]:
        final = _set_final(conn, op["id"], "canceled", {"code": "canceled",
                           "message": "canceled; its worker stopped before confirming"})
        audit.append_event(conn, instance, "operation.canceled", lost, correlation_id=op["correlation_id"])
        truth.on_failure(conn, final, "operation canceled while running")
    elif op["attempt"] < op["max_attempts"]:
        credentials.revoke(conn, op["id"])  # the next attempt gets credentials of its own
        final = conn.execute("""UPDATE operations SET status = 'queued', lease_owner = NULL,
                                   lease_expires_at = NULL, updated_at = now() WHERE id = %s RETURNING *""",
                             (op["id"],)).fetchone()
        audit.append_event(conn, instance, "operation.requeued",
                           lost | {"reason": "worker lease expired; the playbook is idempotent, running it again"},
                           correlation_id=op["correlation_id"])
    else:
        message = f"worker lease expired on attempt {op['attempt']} of {op['max_attempts']}; giving up"
        final = _set_final(conn, op["id"], "failed", {"code": "lease_expired", "message": message,
                                                      "details": {"worker": op["lease_owner"]}})
        audit.append_event(conn, instance, "operation.failed", lost | {"code": "lease_expired", "reason": message},
                           correlation_id=op["correlation_id"])
        truth.on_failure(conn, final, message)
    return final


def sweep_runs(conn: psycopg.Connection, host: str, end_run: Callable[[UUID], None]) -> list[UUID]:
    """Prove ended the runs this machine started for operations that ended or were re-queued without
    their worker (lease recovery, a cancel of a re-queued operation): `end_run(id)` kills what is left
    of each, then the operation records that its run is over. The rows stay locked meanwhile, so no
    worker claims one of them again before its earlier run is gone."""
    rows = conn.execute("""SELECT id FROM operations WHERE run_host = %s AND run_ended_at IS NULL
                              AND status <> 'running' ORDER BY seq FOR UPDATE SKIP LOCKED""", (host,)).fetchall()
    for row in rows:
        end_run(row["id"])
        conn.execute("UPDATE operations SET run_ended_at = now() WHERE id = %s", (row["id"],))
    return [row["id"] for row in rows]


def store_artifacts(conn: psycopg.Connection, operation_id: UUID, attempt: int, tarball: bytes) -> None:
    conn.execute("""INSERT INTO operation_artifacts (operation_id, attempt, tarball) VALUES (%s, %s, %s)
                    ON CONFLICT (operation_id, attempt) DO UPDATE SET tarball = EXCLUDED.tarball""",
                 (operation_id, attempt, tarball))


def get_artifacts(conn: psycopg.Connection, operation_id: UUID, attempt: int | None) -> dict:
    row = conn.execute("""SELECT attempt, tarball FROM operation_artifacts WHERE operation_id = %s
                           AND (%s::int IS NULL OR attempt = %s) ORDER BY attempt DESC LIMIT 1""",
                       (operation_id, attempt, attempt)).fetchone()
    if row is None:
        raise not_found("operation_artifacts", operation_id)
    return row

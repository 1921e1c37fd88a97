"""Operation routes: POST a lifecycle or member action -> 202 with the queued operation; read,
list, cancel; download a run's artifacts; follow the timeline as Server-Sent Events."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated
from uuid import UUID

from fastapi import Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool

from .. import docs, errors
from ..audit import service as audit
from ..common import Page, decode_cursor
from ..deps import DB, AppSettings, Caller, CursorParam, LimitParam, get_operation_settings, router
from ..errors import ApiError
from ..iam.auth import principal_for_token_id
from ..instances import service as instances
from ..location import LocatedRoute
from . import service
from .kinds import KINDS
from .schemas import (
    IdempotencyKey,
    MemberAdd,
    MemberReplace,
    Operation,
    OperationStatus,
    Reconfigure,
    Upgrade,
)

api = router("operations")
api.route_class = LocatedRoute  # Location on 201/202 (gpuaas_api.location)
KeyHeader = Annotated[IdempotencyKey | None, Header(
    alias="Idempotency-Key", description="same key (per caller and instance) returns the same operation")]
ACCEPTED = {"status_code": 202, "response_model": Operation}


def _require(caller, kind: str, instance: dict) -> None:
    for key in KINDS[kind].permissions:
        caller.require(key, tenant_id=instance["tenant_id"], project_id=instance["project_id"])


def _accept(request: Request, db, caller, instance_id: UUID, kind: str, body: dict | None, key: str | None,
            member_id: UUID | None = None) -> dict:
    with db.transaction() as conn:
        instance = instances.get_instance(conn, instance_id)
        _require(caller, kind, instance)
        if member_id is not None:
            instances.get_member(conn, instance_id, member_id)
        return service.accept(conn, get_operation_settings(request), caller, instance_id, kind, body or {},
                              member_id=member_id, idempotency_key=key)


@api.post("/v1/instances/{instance_id}/deploy", operation_id="instances_deploy",
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "instance_already_deployed"), **ACCEPTED)
def deploy(instance_id: UUID, request: Request, caller: Caller, db: DB, idempotency_key: KeyHeader = None):
    """Deploy a created instance: generates its secrets, runs the adapter's deploy playbook; the
    instance is `running` only once the run proved the cluster works."""
    return _accept(request, db, caller, instance_id, "deploy", None, idempotency_key)


@api.post("/v1/instances/{instance_id}/reconfigure", operation_id="instances_reconfigure",
          openapi_extra=docs.example({'parameters': {'partition_name': 'batch'}}),
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "invalid_parameters"), **ACCEPTED)
def reconfigure(instance_id: UUID, request: Request, caller: Caller, db: DB, body: Reconfigure | None = None,
                idempotency_key: KeyHeader = None):
    """Queue a reconfigure: apply changed parameters to the running instance (202 with the operation)."""
    return _accept(request, db, caller, instance_id, "reconfigure", body and body.model_dump(mode="json"),
                   idempotency_key)


@api.post("/v1/instances/{instance_id}/upgrade", operation_id="instances_upgrade",
          openapi_extra=docs.example({'app_version_id': '0e1d2c3b-4a59-4687-a5b4-c3d2e1f0a9b8'}),
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "already_at_version", "version_not_usable",
                                     "artifact_not_active", "compatibility_refused", "not_entitled",
                                     "policy_denied"), **ACCEPTED)
def upgrade(instance_id: UUID, body: Upgrade, request: Request, caller: Caller, db: DB,
            idempotency_key: KeyHeader = None):
    """Move to another active, digest-pinned version of the same app (the current one is kept as the
    rollback target)."""
    return _accept(request, db, caller, instance_id, "upgrade", body.model_dump(mode="json"), idempotency_key)


@api.post("/v1/instances/{instance_id}/rollback", operation_id="instances_rollback",
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "no_previous_version", "version_not_usable"), **ACCEPTED)
def rollback(instance_id: UUID, request: Request, caller: Caller, db: DB, idempotency_key: KeyHeader = None):
    """Back to the previous digest-pinned version (409 no_previous_version when there is none)."""
    return _accept(request, db, caller, instance_id, "rollback", None, idempotency_key)


@api.post("/v1/instances/{instance_id}/decommission", operation_id="instances_decommission",
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook"), **ACCEPTED)
def decommission(instance_id: UUID, request: Request, caller: Caller, db: DB, idempotency_key: KeyHeader = None):
    """Tear the runtime down on every host (verified by the playbook); the instance ends `stopped`
    and can then be deleted."""
    return _accept(request, db, caller, instance_id, "decommission", None, idempotency_key)


@api.post("/v1/instances/{instance_id}/refresh", operation_id="instances_refresh",
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "no_status_module"), **ACCEPTED)
def refresh(instance_id: UUID, request: Request, caller: Caller, db: DB, idempotency_key: KeyHeader = None):
    """Read member state from the runtime (read-only) and set member statuses to match."""
    return _accept(request, db, caller, instance_id, "refresh", None, idempotency_key)


@api.post("/v1/instances/{instance_id}/access-sync", operation_id="instances_access_sync",
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook"), **ACCEPTED)
def access_sync(instance_id: UUID, request: Request, caller: Caller, db: DB, idempotency_key: KeyHeader = None):
    """Apply the instance's access map now (runtime identities, accounts, logins and SSH keys; docs/scheduler.md).
    The platform queues one by itself whenever a role binding, a service account or an SSH key changes."""
    return _accept(request, db, caller, instance_id, "access_sync", {"reason": "requested"}, idempotency_key)


@api.post("/v1/instances/{instance_id}/members", operation_id="members_add",
          openapi_extra=docs.example({'role': 'compute',
                                      'allocation_id': '4d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a',
                                      'host_name': 'gpu-a3'}),
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "unknown_role", "role_at_max", "allocation.unknown",
                                     "no_free_host", "placement.host", "host_taken", "host_in_use"), **ACCEPTED)
def add_member(instance_id: UUID, body: MemberAdd, request: Request, caller: Caller, db: DB,
               idempotency_key: KeyHeader = None):
    """Add a member: a pending member is created now on the allocation host; the run makes it join."""
    return _accept(request, db, caller, instance_id, "member_add", body.model_dump(mode="json"), idempotency_key)


@api.post("/v1/instances/{instance_id}/members/{member_id}/drain", operation_id="members_drain",
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "member_busy", "member_state_conflict",
                                     "member_already_removed"), **ACCEPTED)
def drain_member(instance_id: UUID, member_id: UUID, request: Request, caller: Caller, db: DB,
                 idempotency_key: KeyHeader = None):
    """Queue a drain of one member: it stops taking new work and finishes what it runs (202 with the operation)."""
    return _accept(request, db, caller, instance_id, "member_drain", None, idempotency_key, member_id)


@api.post("/v1/instances/{instance_id}/members/{member_id}/resume", operation_id="members_resume",
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "member_busy", "member_state_conflict",
                                     "member_already_removed"), **ACCEPTED)
def resume_member(instance_id: UUID, member_id: UUID, request: Request, caller: Caller, db: DB,
                  idempotency_key: KeyHeader = None):
    """Queue a resume of a drained member: it takes work again (202 with the operation)."""
    return _accept(request, db, caller, instance_id, "member_resume", None, idempotency_key, member_id)


@api.post("/v1/instances/{instance_id}/members/{member_id}/remove", operation_id="members_remove",
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "member_busy", "member_state_conflict",
                                     "member_already_removed"), **ACCEPTED)
def remove_member(instance_id: UUID, member_id: UUID, request: Request, caller: Caller, db: DB,
                  idempotency_key: KeyHeader = None):
    """Queue the removal of one member from the instance; the others keep running (202 with the operation)."""
    return _accept(request, db, caller, instance_id, "member_remove", None, idempotency_key, member_id)


@api.post("/v1/instances/{instance_id}/members/{member_id}/replace", operation_id="members_replace",
          openapi_extra=docs.example({'allocation_id': '4d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a', 'host_name': 'gpu-a4'}),
          responses=errors.responses("quota_exceeded", "idempotency_key_reused", "instance_not_operable",
                                     "instance_decommissioning", "action_not_supported", "operation_in_progress",
                                     "no_playbook", "member_busy", "member_state_conflict", "member_already_removed",
                                     "allocation.unknown", "no_free_host", "placement.host", "host_taken",
                                     "host_in_use"), **ACCEPTED)
def replace_member(instance_id: UUID, member_id: UUID, body: MemberReplace, request: Request, caller: Caller,
                   db: DB, idempotency_key: KeyHeader = None):
    """Replace a member by a new one on another host: the new one joins first, then the old one is
    drained and removed."""
    return _accept(request, db, caller, instance_id, "member_replace", body.model_dump(mode="json"),
                   idempotency_key, member_id)


def _authorized_operation(conn, caller, operation_id: UUID, *, act: bool) -> dict:
    op = service.get(conn, operation_id)
    instance = instances.get_instance(conn, op["instance_id"], include_deleted=True)
    if act:
        _require(caller, op["kind"], instance)
    else:
        caller.require("apps.instance.read", tenant_id=instance["tenant_id"], project_id=instance["project_id"])
    return op


@api.get("/v1/operations/{operation_id}", operation_id="operations_get", response_model=Operation)
def get_operation(operation_id: UUID, caller: Caller, db: DB):
    """One operation: status, progress (tasks done and total, current hosts), result and failure."""
    with db.transaction() as conn:
        return _authorized_operation(conn, caller, operation_id, act=False)


@api.post("/v1/operations/{operation_id}/cancel", operation_id="operations_cancel",
          responses=errors.responses("operation_finished"),
          status_code=202, response_model=Operation)
def cancel_operation(operation_id: UUID, caller: Caller, db: DB):
    """Queued: canceled at once. Running: `cancel_requested` is set and the worker stops the whole
    run within seconds; the operation then ends `canceled`. Finished: 409."""
    with db.transaction() as conn:
        _authorized_operation(conn, caller, operation_id, act=True)
        return service.cancel(conn, caller, operation_id)


@api.get("/v1/instances/{instance_id}/operations", operation_id="operations_list", response_model=Page[Operation])
def list_operations(instance_id: UUID, caller: Caller, db: DB,
                    status: Annotated[OperationStatus | None, Query()] = None,
                    cursor: CursorParam = None, limit: LimitParam = 50):
    """The instance's operations in queue order (oldest first)."""
    with db.transaction() as conn:
        instance = instances.get_instance(conn, instance_id, include_deleted=True)
        caller.require("apps.instance.read", tenant_id=instance["tenant_id"], project_id=instance["project_id"])
        items, nxt = service.list_for_instance(conn, instance_id, status=status, after=decode_cursor(cursor),
                                               limit=limit)
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/operations/{operation_id}/artifacts", operation_id="operations_artifacts_get", response_class=Response,
         responses={200: {"content": {"application/gzip": {}}, "description": "tar.gz of the run directory"}})
def download_artifacts(operation_id: UUID, caller: Caller, db: DB,
                       attempt: Annotated[int | None, Query(ge=1, le=1000)] = None):
    """The run's private data dir (inventory, vars without secrets, ansible-runner artifacts) as
    tar.gz; default the latest attempt. Needs the permission that runs this kind of operation."""
    with db.transaction() as conn:
        _authorized_operation(conn, caller, operation_id, act=True)
        row = service.get_artifacts(conn, operation_id, attempt)
    name = f"operation-{operation_id}-attempt-{row['attempt']}.tar.gz"
    return Response(bytes(row["tarball"]), media_type="application/gzip",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15


@api.get("/v1/instances/{instance_id}/events/stream", operation_id="events_stream", response_class=StreamingResponse,
         responses={200: {"content": {"text/event-stream": {}}, "description":
                          "Server-Sent Events: `id` is the event id, `event` its type, `data` the event JSON"}})
async def stream_events(instance_id: UUID, request: Request, caller: Caller, db: DB, settings: AppSettings,
                        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID",
                                                                    pattern=r"^[0-9]{1,19}$")] = None,
                        after: Annotated[int | None, Query(ge=0, lt=2**63,
                                                           description="start after this event id")] = None,
                        max_seconds: Annotated[int, Query(ge=1, le=3600, description="end the stream after this long; "
                                                          "clients reconnect with Last-Event-ID")] = 600):
    """The instance's timeline as it grows. Resumes after `Last-Event-ID` (or `after`); ends when the
    client disconnects, after max_seconds, or (with a last `end` event) when a re-check finds the token
    revoked or expired or the permission gone."""
    def authorize(principal) -> None:
        with db.transaction() as conn:
            instance = instances.get_instance(conn, instance_id, include_deleted=True)
            principal.require("apps.instance.read", tenant_id=instance["tenant_id"],
                              project_id=instance["project_id"])

    def still_authorized() -> bool:
        with db.transaction() as conn:
            principal = principal_for_token_id(conn, caller.token_id)
        if principal is None:  # revoked, expired, or its principal disabled
            return False
        try:
            authorize(principal)
        except ApiError:
            return False
        return True

    await run_in_threadpool(authorize, caller)
    follow = audit.Follow(after=int(last_event_id) if last_event_id else (after or 0))

    async def events():
        deadline, quiet_since = time.monotonic() + max_seconds, time.monotonic()
        recheck_at = time.monotonic() + settings.stream_recheck_seconds
        yield "retry: 2000\n\n"
        while time.monotonic() < deadline and not await request.is_disconnected():
            if time.monotonic() >= recheck_at:
                if not await run_in_threadpool(still_authorized):
                    yield 'event: end\ndata: {"reason": "unauthorized"}\n\n'
                    return
                recheck_at = time.monotonic() + settings.stream_recheck_seconds
            rows = await run_in_threadpool(audit.followed_events, db, instance_id, follow)
            for row in rows:
                data = to_json(row).decode()  # the REST answers' serializer: same timestamps
                yield f"id: {row['id']}\nevent: {row['type']}\ndata: {data}\n\n"
            if rows:
                quiet_since = time.monotonic()
                continue
            if time.monotonic() - quiet_since > KEEPALIVE_SECONDS:
                quiet_since = time.monotonic()
                yield ": keepalive\n\n"
            await asyncio.sleep(POLL_SECONDS)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

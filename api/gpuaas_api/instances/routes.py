from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import Query, Response

from .. import docs, errors
from ..audit import service as audit
from ..catalog.adapter import ActionKind, CredentialName, RoleName
from ..common import Page, Slug, Token, decode_cursor
from ..deps import DB, AppSettings, Caller, CursorParam, LimitParam, RunSettings, router
from ..iam.service import get_project
from ..location import LocatedRoute
from . import credentials, run_vars, service
from .schemas import (
    Event,
    Instance,
    InstanceCreate,
    InstanceStatus,
    InstanceUpdate,
    Inventory,
    IssuedCredential,
    Member,
    MemberStatus,
    RunSecrets,
)

api = router("instances")
api.route_class = LocatedRoute  # Location on 201/202 (gpuaas_api.location)


def _authorized_instance(conn, caller, permission: str, instance_id: UUID) -> dict:
    instance = service.get_instance(conn, instance_id)
    caller.require(permission, tenant_id=instance["tenant_id"], project_id=instance["project_id"])
    return instance


@api.post("/v1/projects/{project_id}/instances", operation_id="instances_create",
          openapi_extra=docs.example({'name': 'train-1',
                                      'app_slug': 'hpc-cluster',
                                      'allocation_ids': ['4d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a'],
                                      'topology': [{'role': 'controller', 'count': 1},
                                                   {'role': 'compute', 'count': 2}],
                                      'labels': {'team': 'vision'}}),
          responses=errors.responses("not_entitled", "policy_denied", "version_not_usable", "artifact_not_active",
                                     "compatibility_refused", "quota_exceeded", "host_in_use", "unknown_role",
                                     "invalid_parameters", "allocation.unknown", "duplicate_node_name"),
          response_model=Instance, status_code=201)
def create_instance(project_id: UUID, body: InstanceCreate, caller: Caller, db: DB, settings: AppSettings):
    """Create a project-owned app instance. Refusals say why: not_entitled / policy_denied (403),
    version_not_usable / artifact_not_active (409), compatibility_refused with every reason (422)."""
    with db.transaction() as conn:
        project = get_project(conn, project_id)
        caller.require("apps.instance.create", tenant_id=project["tenant_id"], project_id=project_id)
        return service.create_instance(conn, caller, project, body, max_instances=settings.max_instances_per_project)


@api.get("/v1/projects/{project_id}/instances", operation_id="instances_list", response_model=Page[Instance])
def list_instances(project_id: UUID, caller: Caller, db: DB,
                   status: Annotated[InstanceStatus | None, Query()] = None,
                   app_slug: Annotated[Slug | None, Query()] = None,
                   cursor: CursorParam = None, limit: LimitParam = 50):
    """The project's app instances, newest first, optionally by status or app."""
    with db.transaction() as conn:
        project = get_project(conn, project_id)
        caller.require("apps.instance.read", tenant_id=project["tenant_id"], project_id=project_id)
        items, nxt = service.list_instances(conn, project_id=project_id, status=status, app_slug=app_slug,
                                            before=decode_cursor(cursor), limit=limit)
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/instances/{instance_id}", operation_id="instances_get", response_model=Instance)
def get_instance(instance_id: UUID, caller: Caller, db: DB):
    """One app instance: status, topology, labels and parameters."""
    with db.transaction() as conn:
        _authorized_instance(conn, caller, "apps.instance.read", instance_id)
        return service.get_instance_view(conn, instance_id)


@api.patch("/v1/instances/{instance_id}", operation_id="instances_update", response_model=Instance,
           openapi_extra=docs.example({'labels': {'team': 'vision-research',
                                                  'cost-center': 'cc-42',
                                                  'obsolete': None}}),
           responses=errors.responses("not_shared", "project_not_in_tenant"))
def update_instance(instance_id: UUID, body: InstanceUpdate, caller: Caller, db: DB):
    """Merge labels into the instance (JSON merge, RFC 7396: a key set to null is removed, keys not named stay),
    opt it in to or out of canary versions, or replace a tenant-shared runtime's allowlist of attachable projects
    (a tenant admin's change, `apps.shared_runtime.manage`)."""
    with db.transaction() as conn:
        _authorized_instance(conn, caller, "apps.instance.update", instance_id)
        return service.update_instance(conn, caller, instance_id, body.model_dump(exclude_unset=True))


@api.delete("/v1/instances/{instance_id}", operation_id="instances_delete",
            responses=errors.responses("operation_open", "instance_not_deletable", "member_still_live"),
                                       status_code=204)
def delete_instance(instance_id: UUID, caller: Caller, db: DB):
    """Delete an instance that runs nothing (created or stopped); others need decommission first (409)."""
    with db.transaction() as conn:
        _authorized_instance(conn, caller, "apps.instance.delete", instance_id)
        service.delete_instance(conn, caller, instance_id)


@api.get("/v1/instances/{instance_id}/inventory", operation_id="instances_inventory_get", response_model=Inventory,
         responses=errors.responses("no_playbook", "site_vars_conflict"))
def get_inventory(instance_id: UUID, caller: Caller, db: DB, settings: RunSettings,
                  action: Annotated[ActionKind | None, Query(
                      description="the operation kind whose run to describe: its catalog action_vars join "
                                  "all.vars (422 no_playbook if the app has no playbook for it)")] = None):
    """The instance's Ansible inventory: the same hosts, groups and connection variables the
    platform's own runs use (without the platform's SSH key), and the variables those runs get, secrets
    aside (`all.vars`: the catalog's, the tenant parameters, the workload image; `site_vars`: the operator's),
    for operators and AWX (the collection's `gpuaas.apps.gpuaas` inventory plugin reads it; docs/awx.md)."""
    with db.transaction() as conn:
        instance = _authorized_instance(conn, caller, "apps.instance.read", instance_id)
        return run_vars.inventory(conn, settings, instance, action)


@api.post("/v1/instances/{instance_id}/run-secrets", operation_id="instances_run_secrets_issue",
          response_model=RunSecrets)
def issue_run_secrets(instance_id: UUID, caller: Caller, db: DB, settings: RunSettings, response: Response):
    """The variables a run of the instance gets that no inventory carries: its secrets (the adapter's
    `secrets`) and the access map, for a run outside the platform (an AWX job: the collection's
    `gpuaas.apps.run_secrets` vars plugin reads them as the job starts; docs/awx.md). Needs
    `apps.instance.run_secrets.read`. The answer is the only copy (`Cache-Control: no-store`; nothing logs it);
    the reading is audited (`runtime_secret.issued`, purpose `external_run`: who, which variables, never a value)."""
    response.headers["Cache-Control"] = "no-store"
    with db.transaction() as conn:
        instance = _authorized_instance(conn, caller, run_vars.PERMISSION, instance_id)
        return run_vars.run_secrets(conn, settings, caller, instance)


@api.get("/v1/instances/{instance_id}/members", operation_id="members_list", response_model=Page[Member])
def list_members(instance_id: UUID, caller: Caller, db: DB,
                 role: Annotated[RoleName | None, Query()] = None,
                 status: Annotated[MemberStatus | None, Query()] = None,
                 cursor: CursorParam = None, limit: LimitParam = 100):
    """The instance's members (hosts with a role), optionally by role or status."""
    with db.transaction() as conn:
        _authorized_instance(conn, caller, "apps.instance.read", instance_id)
        items, nxt = service.list_members(conn, instance_id, role=role, status=status,
                                          after=decode_cursor(cursor), limit=limit)
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/instances/{instance_id}/members/{member_id}", operation_id="members_get", response_model=Member)
def get_member(instance_id: UUID, member_id: UUID, caller: Caller, db: DB):
    """One member of an instance."""
    with db.transaction() as conn:
        _authorized_instance(conn, caller, "apps.instance.read", instance_id)
        return service.get_member(conn, instance_id, member_id)


@api.get("/v1/instances/{instance_id}/events", operation_id="events_list", response_model=Page[Event])
def list_events(instance_id: UUID, caller: Caller, db: DB,
                type: Annotated[Token | None, Query(description="event type, e.g. apps.instance.running")] = None,
                member_id: UUID | None = None,
                correlation_id: Annotated[Token | None, Query()] = None,
                cursor: CursorParam = None, limit: LimitParam = 100):
    """The instance's timeline, oldest first; pass next_cursor to continue (also to poll for new events)."""
    with db.transaction() as conn:
        instance = service.get_instance(conn, instance_id, include_deleted=True)
        caller.require("apps.instance.read", tenant_id=instance["tenant_id"], project_id=instance["project_id"])
        items, nxt = audit.list_events(conn, instance_id, after=decode_cursor(cursor), limit=limit,
                                       event_type=type, member_id=member_id, correlation_id=correlation_id)
    return {"items": items, "next_cursor": nxt}


@api.post("/v1/instances/{instance_id}/credentials/{name}", operation_id="credentials_issue",
          response_model=IssuedCredential,
          responses=errors.responses("instance_not_operable", "version_not_usable", "credential_unavailable"))
def issue_credential(instance_id: UUID, name: CredentialName, caller: Caller, db: DB, settings: RunSettings,
                     response: Response):
    """Issue a runtime access credential the instance's app declares (its adapter's `credentials`, e.g. a
    cluster's admin configuration), read now from a serving member of the declared role (each in turn until
    one answers). The answer is the only copy: nothing stores, logs or caches it; the issuance is audited
    (`runtime_secret.issued`: who, which credential, which member; never the content). Needs
    `apps.instance.credentials.issue`. 404 for a name the app does not declare, 409 `instance_not_operable`
    unless the instance is running or degraded, 502 `credential_unavailable` when no member answered (each
    member's reason in `details.attempts`)."""
    response.headers["Cache-Control"] = "no-store"
    return credentials.issue(db, settings, caller, instance_id, name)

"""Tenant-shared runtimes (docs/tenant-shared.md): the projects attached to one, and the submit grants that let a
principal submit into another attached project's account. Changes are a tenant admin's
(`apps.shared_runtime.manage`); reads need `apps.instance.read` on the runtime, or, for a project's own
attachments, in that project."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, Field

from .. import docs, errors
from ..common import Reason
from ..deps import DB, Caller, RunSettings, router
from ..iam.service import get_project
from ..location import LocatedRoute
from . import service

api = router("shared runtimes")
api.route_class = LocatedRoute


class AttachmentCreate(BaseModel):
    project_id: UUID
    reason: Reason = Field(description="why the project uses the shared runtime (audited)")


class Detach(BaseModel):
    reason: Reason = Field(description="why the project leaves (audited)")


class Attachment(BaseModel):
    id: UUID
    instance_id: UUID
    instance_name: str
    app_slug: str
    environment: str
    project_id: UUID
    project_name: str
    account: str = Field(description="the runtime account the project's jobs are charged to")
    owner: bool = Field(description="the runtime's own project: the tenant-shared owner record, never detached")
    status: Literal["attached", "detached"]
    reason: str
    created_at: datetime
    detached_at: datetime | None
    operation_ids: list[UUID] = Field(default_factory=list, description="runs this change queued (access_sync, "
                                      "member_remove of the project's contributed members)")


class AttachmentList(BaseModel):
    items: list[Attachment]


class GrantCreate(BaseModel):
    principal_kind: Literal["user", "service_account"]
    principal_id: UUID
    target_project_id: UUID = Field(description="the attached project whose account the principal may submit into")
    reason: Reason = Field(description="why (audited)")


class Grant(BaseModel):
    id: UUID
    instance_id: UUID
    principal_kind: str
    principal_id: UUID
    principal_name: str | None
    target_project_id: UUID
    target_project_name: str
    account: str
    reason: str
    created_by: UUID
    created_at: datetime
    revoked_at: datetime | None
    operation_ids: list[UUID] = Field(default_factory=list, description="the access_sync this change queued")


class GrantList(BaseModel):
    items: list[Grant]


_SHARED = ("not_shared",)


@api.post("/v1/instances/{instance_id}/attachments", operation_id="attachments_create", response_model=Attachment,
          status_code=201, openapi_extra=docs.example({"project_id": "6c1f0e52-3b8e-4e0a-9a9e-7d5c1b2a4f10",
                                                       "reason": "the vision team's training runs"}),
          responses=errors.responses("project_not_allowlisted", "not_entitled", "already_attached", *_SHARED))
def attach(instance_id: UUID, body: AttachmentCreate, caller: Caller, db: DB, settings: RunSettings):
    """Attach a project of the tenant to this shared runtime (`apps.shared_runtime.manage`): one on the runtime's
    allowlist and entitled to its app. Its account, and the associations of its principals that may submit, come
    with the access_sync this queues."""
    with db.transaction() as conn:
        return service.attach(conn, settings, caller, instance_id, body.project_id, body.reason)


@api.get("/v1/instances/{instance_id}/attachments", operation_id="attachments_list", response_model=AttachmentList,
         responses=errors.responses(*_SHARED))
def list_attachments(instance_id: UUID, caller: Caller, db: DB):
    """The projects attached to this shared runtime, its own first (`apps.instance.read`)."""
    with db.transaction() as conn:
        return {"items": service.list_attachments(conn, caller, instance_id)}


@api.get("/v1/instances/{instance_id}/attachments/{project_id}", operation_id="attachments_get",
         response_model=Attachment, responses=errors.responses(*_SHARED))
def get_attachment(instance_id: UUID, project_id: UUID, caller: Caller, db: DB):
    """A project's latest attachment to this shared runtime, attached or detached (`apps.instance.read`)."""
    with db.transaction() as conn:
        return service.get_attachment(conn, caller, instance_id, project_id)


@api.post("/v1/instances/{instance_id}/attachments/{project_id}/detach", operation_id="attachments_detach",
          response_model=Attachment, openapi_extra=docs.example({"reason": "the project moved to its own cluster"}),
          responses=errors.responses("owner_attachment", "attachment_has_jobs", "operation_open", "already_detached",
                                     "instance_not_operable", "scheduler_unavailable", *_SHARED))
def detach(instance_id: UUID, project_id: UUID, body: Detach, caller: Caller, db: DB, settings: RunSettings):
    """Detach a project (`apps.shared_runtime.manage`), from a runtime that is running, degraded, created or
    stopped (409 instance_not_operable otherwise). Refused while a job would lose its association (409
    attachment_has_jobs: a job of the project's account, or one its principals run in another account through a
    grant; cancel them or let them end), or while an operation on one of its members is open (409
    operation_open). Its principals lose the runtime at once; the grants into its account and those of principals
    it alone served are revoked; its contributed members are removed (a member_remove each) and its account with
    the access_sync this queues."""
    return service.detach(db, settings, caller, instance_id, project_id, body.reason)


@api.get("/v1/projects/{project_id}/attachments", operation_id="project_attachments_list",
         response_model=AttachmentList)
def project_attachments(project_id: UUID, caller: Caller, db: DB):
    """The shared runtimes this project is attached to, with its account on each (`apps.instance.read` in the
    project): the instance whose jobs routes its principals use."""
    with db.transaction() as conn:
        return {"items": service.project_attachments(conn, caller, get_project(conn, project_id))}


@api.post("/v1/instances/{instance_id}/submit-grants", operation_id="submit_grants_create", response_model=Grant,
          status_code=201, openapi_extra=docs.example({
              "principal_kind": "service_account", "principal_id": "0b7c6a0e-5b1f-4c55-9a53-2f4f0f7c1d21",
              "target_project_id": "6c1f0e52-3b8e-4e0a-9a9e-7d5c1b2a4f10", "reason": "shared benchmark queue"}),
          responses=errors.responses("project_not_attached", "principal_not_served", "already_allowed", *_SHARED))
def create_grant(instance_id: UUID, body: GrantCreate, caller: Caller, db: DB, settings: RunSettings):
    """Let one principal that uses this runtime through its own project submit into another attached project's
    account (`apps.shared_runtime.manage`). Cross-project submission is denied without one; a grant adds exactly
    the association it names, with the access_sync this queues."""
    with db.transaction() as conn:
        return service.grant(conn, settings, caller, instance_id, principal_kind=body.principal_kind,
                             principal_id=body.principal_id, target_project_id=body.target_project_id,
                             reason=body.reason)


@api.get("/v1/instances/{instance_id}/submit-grants", operation_id="submit_grants_list", response_model=GrantList,
         responses=errors.responses(*_SHARED))
def list_grants(instance_id: UUID, caller: Caller, db: DB):
    """The live submit grants of this shared runtime (`apps.instance.read`)."""
    with db.transaction() as conn:
        return {"items": service.list_grants(conn, caller, instance_id)}


@api.get("/v1/instances/{instance_id}/submit-grants/{grant_id}", operation_id="submit_grants_get",
         response_model=Grant, responses=errors.responses(*_SHARED))
def get_grant(instance_id: UUID, grant_id: UUID, caller: Caller, db: DB):
    """One submit grant, live or revoked (`apps.instance.read`)."""
    with db.transaction() as conn:
        return service.get_grant(conn, caller, instance_id, grant_id)


@api.post("/v1/instances/{instance_id}/submit-grants/{grant_id}/revoke", operation_id="submit_grants_revoke",
          response_model=Grant, responses=errors.responses("grant_has_jobs", "already_revoked", "instance_not_operable",
                                                           "scheduler_unavailable", *_SHARED))
def revoke_grant(instance_id: UUID, grant_id: UUID, caller: Caller, db: DB, settings: RunSettings):
    """Revoke a submit grant (`apps.shared_runtime.manage`); its association goes with the access_sync this
    queues. Refused while a job runs under that association (409 grant_has_jobs: the runtime would cancel it)."""
    return service.revoke(db, settings, caller, instance_id, grant_id)


class MemberCharge(BaseModel):
    member_id: UUID
    role: str
    node_name: str
    status: str
    allocation_id: UUID
    project_id: UUID = Field(description="the project charged for this member's time")
    project_name: str | None
    charged_as: Literal["project", "tenant_shared_owner"]


class AccountCharge(BaseModel):
    account: str
    project_id: UUID = Field(description="the project charged for the jobs of this account")
    project_name: str | None
    charged_as: Literal["project"]


class BillingSplit(BaseModel):
    """Who pays for what on this instance (docs/metering.md, docs/tenant-shared.md "Billing split")."""
    instance_id: UUID
    control_plane_scope: str
    owner_project_id: UUID
    members: list[MemberCharge]
    job_accounts: list[AccountCharge]


@api.get("/v1/instances/{instance_id}/billing", operation_id="instances_billing_get", response_model=BillingSplit)
def billing_split(instance_id: UUID, caller: Caller, db: DB):
    """The billing split of the instance (`apps.instance.read`): each member that is not removed (pending ones
    too, so the split is visible before a deploy) with the project charged for its time, and each account's
    project, charged for its jobs. A tenant-shared runtime's controller and reserved capacity are the owner's
    (`tenant_shared_owner`); contributed members and each project's jobs are that project's."""
    with db.transaction() as conn:
        return service.billing_split(conn, caller, instance_id)

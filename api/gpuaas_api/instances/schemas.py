from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..allocations.schemas import Host
from ..catalog.adapter import OperatingMode, RoleName, VersionString
from ..catalog.schemas import JsonObject
from ..common import Name, Reason, Slug

InstanceStatus = Literal["created", "starting", "running", "degraded", "stopping", "stopped", "failed"]
MemberStatus = Literal["pending", "joining", "active", "draining", "drained", "removing", "removed", "failed"]
LabelKey = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9._/\-]{0,61}[a-z0-9])?$")]
LabelValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._\-]{0,63}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Placement(Strict):
    allocation_id: UUID
    host_name: Name


class RoleRequest(Strict):
    role: RoleName
    count: int = Field(ge=0, le=1024)
    placement: list[Placement] | None = Field(default=None, max_length=1024,
                                              description="optional explicit hosts; default: platform chooses")


class InstanceCreate(Strict):
    name: Name
    app_slug: Slug
    version: VersionString | None = Field(default=None, description="default: the newest active version")
    allocation_ids: list[UUID] = Field(min_length=1, max_length=64, description="allocation intent")
    topology: list[RoleRequest] = Field(default_factory=list, max_length=16,
                                        description="desired count per role; absent roles get the adapter minimum")
    operating_mode: OperatingMode | None = Field(
        default=None, description="tenant_dedicated (the only mode that exists today); platform_managed is refused")
    control_plane_scope: Literal["project", "tenant", "platform"] | None = Field(
        default=None, description="project (default): the instance serves its own project. tenant: a tenant-shared "
        "runtime other projects attach to (docs/tenant-shared.md); a tenant admin's request only. platform is "
        "refused")
    environment: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,31}$")] = Field(
        default="default", description="a tenant-shared runtime's environment: one runtime per tenant, app and "
        "environment")
    attachable_project_ids: list[UUID] = Field(
        default_factory=list, max_length=256, description="a tenant-shared runtime's allowlist: the projects of "
        "the tenant a tenant admin may attach to it")
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=32)
    parameters: JsonObject = Field(default_factory=dict,
                                   description="extra vars for every run of this instance; never secret values")
    canary: bool = Field(default=False, description="opt in to canary versions: only such instances may be "
                         "created on, or upgraded to, a version in canary")


class InstanceUpdate(Strict):
    labels: dict[LabelKey, LabelValue | None] | None = Field(
        default=None, max_length=32,
        description="merged into the instance's labels (JSON merge patch, RFC 7396): a key with a value sets it, "
                    "a key with null removes it, keys not named stay")
    canary: bool | None = Field(default=None, description="opt in to (or out of) canary versions")
    attachable_project_ids: list[UUID] | None = Field(
        default=None, max_length=256, description="a tenant-shared runtime's allowlist, replaced whole (a tenant "
        "admin's change: `apps.shared_runtime.manage`); projects already attached stay attached")

    @model_validator(mode="after")
    def _something_set(self):
        if not self.model_fields_set or any(getattr(self, f) is None for f in self.model_fields_set):
            raise ValueError("set labels, canary or attachable_project_ids (not null)")
        return self


class RoleSummary(BaseModel):
    name: str
    desired_count: int
    member_count: int
    members_by_status: dict[str, int] = Field(default_factory=dict,
                                              description="the role's members that are not removed, by status")


class Condition(BaseModel):
    """One aspect of the instance's health as the last check read it (Kubernetes-style)."""
    type: Literal["ControlPlaneAvailable", "MembersHealthy", "Healthy"]
    status: Literal["True", "False"]
    reason: str
    message: str
    last_transition_at: datetime


class InstanceHealth(BaseModel):
    """What the last scheduled health check read (health/): none before the first check."""
    checked_at: datetime | None = None
    check: dict[str, Any] = Field(default_factory=dict, description="what ran: status module, hosts, members, "
                                  "seconds")
    conditions: list[Condition] = Field(default_factory=list)


class MemberRuntime(BaseModel):
    """What the last health check read of the member on its hosts."""
    checked_at: datetime | None = None
    reachable: bool | None = None
    observed: str | None = Field(default=None, description="the status the check read; null: unknown")
    reason: str = ""
    details: dict[str, str | int | float | bool | None] = Field(
        default_factory=dict, description="the app's runtime detail as its status module reports it (a scheduler "
        "node's state and reason, the image a replica runs, its probe answer)")


class LastOperation(BaseModel):
    id: UUID
    kind: str
    status: str
    correlation_id: str
    created_at: datetime
    finished_at: datetime | None = None


class Topology(BaseModel):
    roles: list[RoleSummary]


class Instance(BaseModel):
    id: UUID
    name: str
    tenant_id: UUID
    project_id: UUID
    app_slug: str
    app_version: str
    app_version_id: UUID
    artifact_reference: str
    workload_artifact_reference: str | None = None
    canary: bool = False
    smoke_gate_id: UUID | None = Field(default=None, description="set on a smoke instance: the smoke gate that "
                                       "deploys and decommissions it to test a draft version")
    status: InstanceStatus
    status_reason: str
    operating_mode: str
    operating_mode_hint: str | None
    control_plane_scope: str
    environment: str = "default"
    attachable_project_ids: list[UUID] = Field(default_factory=list)
    runtime_backend: str
    tenant_boundary_mode: str
    bound_capacity_shape: str
    topology: Topology
    labels: dict[str, str]
    parameters: dict[str, Any] = Field(default_factory=dict)
    health: InstanceHealth = Field(default_factory=InstanceHealth)
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None


class Member(BaseModel):
    id: UUID
    instance_id: UUID
    role: str
    allocation_id: UUID
    host_name: str
    node_name: str
    host: Host | None = Field(description="the allocation host the member is bound to")
    status: MemberStatus
    status_reason: str
    last_correlation_id: str | None
    last_operation: LastOperation | None = Field(
        default=None, description="the latest operation that named it or ran on the whole instance since it joined")
    runtime: MemberRuntime = Field(default_factory=MemberRuntime)
    created_at: datetime
    updated_at: datetime


class Event(BaseModel):
    id: int
    app_instance_id: UUID
    member_id: UUID | None
    type: str
    occurred_at: datetime
    payload: dict[str, Any]
    correlation_id: str
    tenant_id: UUID
    project_id: UUID
    app_slug: str
    operating_mode: str
    control_plane_scope: str
    runtime_backend: str


class StatusChange(Strict):
    to: InstanceStatus
    reason: Reason


class InventoryGroup(BaseModel):
    hosts: dict[str, dict[str, Any]]


class InventoryAll(BaseModel):
    hosts: dict[str, dict[str, Any]] = Field(description="node name -> ansible_host, ansible_user, ansible_port, "
                                             "gpuaas_instance_id, gpuaas_members [{id, role, status}]")
    children: dict[str, InventoryGroup] = Field(description="the adapter roles' inventory groups")
    vars: dict[str, Any] = Field(default_factory=dict, description=(
        "the variables of the instance's runs (of the `action` asked for): the catalog's vars, the tenant "
        "parameters, the catalog's action_vars of that action, the workload image and its signer's key; data, "
        "never templates"))


class Inventory(BaseModel):
    """An Ansible inventory (the YAML inventory structure, as JSON) of the instance's members, with the variables the
    platform's own runs get (no secret: those come from POST /v1/instances/{id}/run-secrets)."""
    all: InventoryAll
    site_vars: dict[str, Any] = Field(default_factory=dict, description=(
        "not a group: the operator's site variables, below `all.vars`; unlike those, they may be templates over "
        "the run's other variables"))


class RunSecrets(BaseModel):
    """What a run of the instance gets beyond its inventory, read once: the answer is its only copy."""
    variables: dict[str, Any] = Field(description="the instance's secrets and the access map, by variable name")
    issued_at: datetime


class IssuedCredential(BaseModel):
    """A runtime access credential, as issued once: the response is its only copy (never stored, never logged)."""
    name: str = Field(description="the credential's name in the app's adapter (`credentials`)")
    media_type: str = Field(description="what `content` is, as the adapter declares it, e.g. application/yaml")
    filename: str = Field(description="the file name the adapter suggests for it")
    content: str = Field(description="the credential itself")
    node_name: str = Field(description="the member whose host answered")
    issued_at: datetime

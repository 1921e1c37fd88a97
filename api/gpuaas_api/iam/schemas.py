from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ..common import Name, ShortText, Text
from .permissions import ROLES

RoleName = Literal[tuple(ROLES)]  # type: ignore[valid-type]
PrincipalKind = Literal["user", "service_account"]
Email = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9.\-]{1,190}\.[A-Za-z]{2,24}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TenantCreate(Strict):
    name: Name
    display_name: ShortText | None = None


class Tenant(BaseModel):
    id: UUID
    name: str
    display_name: str
    created_at: datetime


class ProjectCreate(Strict):
    name: Name
    display_name: ShortText | None = None


class Project(BaseModel):
    id: UUID
    tenant_id: UUID
    name: str
    display_name: str
    created_at: datetime


class UserCreate(Strict):
    email: Email
    display_name: ShortText | None = None


class User(BaseModel):
    id: UUID
    tenant_id: UUID | None
    email: str
    display_name: str
    disabled: bool
    created_at: datetime


class ServiceAccountCreate(Strict):
    name: Name
    description: Text = ""
    roles: list[Literal["sa_operator", "sa_viewer"]] = Field(default_factory=lambda: ["sa_operator"],
                                                            max_length=2)


class ServiceAccount(BaseModel):
    id: UUID
    tenant_id: UUID
    project_id: UUID
    name: str
    description: str
    disabled: bool
    created_at: datetime


class RoleBindingCreate(Strict):
    principal_kind: PrincipalKind
    principal_id: UUID
    role: RoleName
    tenant_id: UUID | None = Field(default=None, description="for tenant-scoped roles")
    project_id: UUID | None = Field(default=None, description="for project-scoped roles")


class RoleBinding(BaseModel):
    id: UUID
    principal_kind: str
    principal_id: UUID
    role: str
    scope_kind: str
    tenant_id: UUID | None
    project_id: UUID | None
    created_at: datetime


class TokenCreate(Strict):
    name: ShortText
    expires_in_days: int | None = Field(
        default=None, ge=1, le=3650,
        description="at most the cap for the principal's kind, and never past the expiry of the token "
                    "that mints it for itself; default: the service default, clipped to both")


class TokenInfo(BaseModel):
    id: UUID
    name: str
    principal_kind: str
    principal_id: UUID
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class TokensRevoked(BaseModel):
    revoked: int = Field(description="how many live tokens this call revoked")


class TokenIssued(TokenInfo):
    token: str = Field(description="the secret; shown only in this response, stored only as a hash")


class ScopedPermissions(BaseModel):
    role: str
    scope_kind: str
    tenant_id: UUID | None
    project_id: UUID | None
    permissions: list[str]


class Me(BaseModel):
    kind: str
    id: UUID
    name: str
    tenant_id: UUID | None
    project_id: UUID | None
    grants: list[ScopedPermissions]


class RoleInfo(BaseModel):
    name: str
    scope_kinds: list[str] = Field(description="where it can be bound: platform, tenant or project")
    principal_kinds: list[str] = Field(description="to whom: user or service_account")
    description: str
    permissions: list[str]

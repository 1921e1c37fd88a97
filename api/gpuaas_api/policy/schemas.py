from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..common import Slug

Dimension = Literal["region", "capacity_shape", "sku", "artifact_registry"]
PolicyValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$")]


class EntitlementCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    app_slug: Slug


class Entitlement(BaseModel):
    id: UUID
    tenant_id: UUID
    project_id: UUID
    app_slug: str
    created_at: datetime


class OverlayCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scope_kind: Literal["global", "tenant", "project"]
    tenant_id: UUID | None = None
    project_id: UUID | None = None
    dimension: Dimension
    effect: Literal["allow", "deny"]
    values: list[PolicyValue] = Field(min_length=1, max_length=200)

    @model_validator(mode="after")
    def _scope(self):
        if self.scope_kind == "global" and (self.tenant_id or self.project_id):
            raise ValueError("global overlays take no tenant_id or project_id")
        if self.scope_kind == "tenant" and (self.tenant_id is None or self.project_id is not None):
            raise ValueError("tenant overlays take tenant_id only")
        if self.scope_kind == "project" and self.project_id is None:
            raise ValueError("project overlays take project_id")
        return self


class Overlay(BaseModel):
    id: UUID
    scope_kind: str
    tenant_id: UUID | None
    project_id: UUID | None
    dimension: str
    effect: str
    values: list[str]
    created_at: datetime


class EffectiveDimension(BaseModel):
    dimension: str
    allow: list[str] | None = Field(description="null: no allow-list applies")
    deny: list[str]


class EffectivePolicy(BaseModel):
    project_id: UUID
    dimensions: list[EffectiveDimension]

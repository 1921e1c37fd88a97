from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..common import Name

CapacityShape = Literal["baremetal", "gpu_slice"]
Region = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9\-]{0,62}$")]
Sku = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$")]
# An IP address (IPv6 may end in dotted IPv4: ::ffff:10.0.0.1) or a name. Registration resolves it and
# refuses legacy IPv4 spellings (allocations.service.host_addresses); responses carry older rows as stored.
Address = Annotated[str, StringConstraints(
    pattern=r"^([0-9A-Fa-f:.]{2,45}|[A-Za-z0-9]([A-Za-z0-9\-.]{0,251}[A-Za-z0-9])?)$")]
SshUser = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_\-]{0,31}$")]


class Host(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    address: Address
    ssh_user: SshUser = "root"
    ssh_port: int = Field(default=22, ge=1, le=65535)


class AllocationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    project_id: UUID
    name: Name
    capacity_shape: CapacityShape
    sku: Sku | None = None
    gpu_count: int = Field(ge=0, le=4096)
    region: Region
    exclusive: bool | None = Field(default=None, description="default: true for baremetal, false for gpu_slice")
    hosts: list[Host] = Field(min_length=1, max_length=256)

    @model_validator(mode="after")
    def _unique_names(self):
        # Addresses are unique too, by what they reach: allocations.service.host_addresses checks them.
        names = [h.name for h in self.hosts]
        if len(set(names)) != len(names):
            raise ValueError("host names must be unique within an allocation")
        return self


class Allocation(BaseModel):
    id: UUID
    tenant_id: UUID
    project_id: UUID
    name: str
    capacity_shape: str
    sku: str | None
    gpu_count: int
    region: str
    exclusive: bool
    hosts: list[Host]
    created_at: datetime
    released_at: datetime | None

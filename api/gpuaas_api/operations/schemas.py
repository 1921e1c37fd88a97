from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, computed_field

from ..catalog.schemas import JsonObject, RoleName
from ..common import Name
from .kinds import KIND_NAMES

OperationKind = Literal[KIND_NAMES]
OperationStatus = Literal["queued", "running", "succeeded", "failed", "canceled"]
IdempotencyKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:\-]{1,128}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemberAdd(Strict):
    role: RoleName
    allocation_id: UUID
    host_name: Name | None = Field(default=None, description="default: the first free host of the allocation")


class MemberReplace(Strict):
    allocation_id: UUID = Field(description="allocation holding the new member's host")
    host_name: Name | None = Field(default=None, description="default: the first free host of the allocation")


class Reconfigure(Strict):
    parameters: JsonObject = Field(default_factory=dict,
                                   description="merged over the instance parameters for this run; kept on success")


class Upgrade(Strict):
    app_version_id: UUID = Field(description="an active version of the same app")


class OperationError(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class Operation(BaseModel):
    id: UUID
    kind: OperationKind
    status: OperationStatus
    instance_id: UUID
    correlation_id: str
    params: dict[str, Any]
    member_ids: list[UUID]
    attempt: int = Field(description="runs started so far (a lost worker lease re-queues the operation)")
    max_attempts: int
    timeout_s: int
    cancel_requested: bool
    error: OperationError | None
    result: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    # The control-plane machine that ran the latest attempt: read here, never shown to API callers.
    run_host: str | None = Field(None, exclude=True)
    run_ended_at: datetime | None = Field(
        description="when the latest attempt's run was proven over: recorded by its own worker, or found and "
                    "ended by a sweep on its machine after its worker was lost")

    @computed_field(description="true while a run of this operation may still act on hosts: it is running, "
                                "or it ended without its worker (killed, lease lost) and no worker on its "
                                "machine has yet ended what was left of the run")
    @property
    def run_may_be_live(self) -> bool:
        return self.run_host is not None and self.run_ended_at is None

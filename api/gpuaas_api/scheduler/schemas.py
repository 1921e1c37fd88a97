"""The job and node model of docs/scheduler.md, the same for every runtime, as the API shows it: the
gateway's answer plus who the job belongs to on the platform."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

JobState = Literal["pending", "running", "succeeded", "failed", "cancelled"]
NodeState = Literal["idle", "allocated", "mixed", "draining", "drained", "down"]
JobName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
JobId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
NodeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Feature = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")]
Partition = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,32}$")]
AccountName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
MAX_SCRIPT = 65536


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobResources(Strict):
    nodes: int = Field(default=1, ge=1, le=1024)
    tasks: int = Field(default=1, ge=1, le=100000)
    cpus_per_task: int = Field(default=1, ge=1, le=1024)
    gpus: int = Field(default=0, ge=0, le=1024, description="GPUs per node")
    memory_mb: int | None = Field(default=None, ge=1, le=64 * 1024 * 1024, description="memory per node")
    time_limit_minutes: int | None = Field(default=None, ge=1, le=525600)
    partition: Partition | None = None


class JobSubmit(Strict):
    name: JobName
    script: str = Field(min_length=3, max_length=MAX_SCRIPT, description="a batch script, starting with #!")
    account: AccountName | None = Field(default=None, description="default and only choice: your project's "
                                        "account; any other is refused")
    resources: JobResources = Field(default_factory=JobResources)
    working_directory: Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9._/-]{0,255}$")] | None = None

    @field_validator("script")
    @classmethod
    def _script(cls, value: str) -> str:
        if not value.startswith("#!") or "\x00" in value:
            raise ValueError("the script must start with #! (an interpreter line) and hold no NUL")
        return value


class PrincipalRef(BaseModel):
    kind: Literal["user", "service_account"]
    id: UUID


class Job(BaseModel):
    id: str
    name: str
    state: JobState
    runtime_state: str = Field(description="the runtime's own word for the state")
    owner: PrincipalRef | None = Field(description="the platform principal the job runs as; null for a job of "
                                       "a runtime user the platform did not create")
    runtime_user: str
    project_id: UUID | None
    account: str
    submitted_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    resources: dict
    exit_code: int | None
    reason: str | None = None


class Node(BaseModel):
    name: str
    state: NodeState
    runtime_state: str
    reason: str | None = None
    cpus: int | None = None
    memory_mb: int | None = None
    gpus: int | None = None
    features: list[str] = Field(default_factory=list)
    partitions: list[str] = Field(default_factory=list)


class NodeList(BaseModel):
    items: list[Node]


class NodeDrain(Strict):
    reason: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[\x20-\x7e]+$")]


class NodeFeatures(Strict):
    features: list[Feature] = Field(max_length=32)


class Access(BaseModel):
    """How the caller logs in to the instance: as its runtime identity, on the login hosts, with the SSH keys it
    registered (GET /v1/me/ssh-keys)."""
    username: str
    uid: int
    account: str
    login_hosts: list[dict] = Field(description="{node_name, address, port}")
    ssh_keys: int = Field(description="how many SSH keys you registered")
    synced: bool = Field(description="false while an access_sync that carries a change is queued or running")

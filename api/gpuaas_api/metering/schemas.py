# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Usage records and their sums as the API shows them (docs/metering.md). A record's fields are one flat list, so
that a CSV row and a JSON item carry the same columns; those of the other dimension are null."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, Field

Dimension = Literal["member_seconds", "job"]
ChargedAs = Literal["project", "tenant_shared_owner"]
DIMENSIONS: tuple[Dimension, ...] = ("member_seconds", "job")


class UsageRecord(BaseModel):
    id: UUID
    dimension: Dimension
    project_id: UUID = Field(description="the project charged")
    charged_as: ChargedAs = Field(description="project: the project's own use; tenant_shared_owner: the shared "
                                  "runtime's own part (its controller, members its owner placed, jobs of no "
                                  "attached project), charged to the runtime's owner project")
    unattributed: bool = Field(description="a job whose account is no project's of the instance")
    instance_id: UUID
    member_id: UUID | None = None
    role: str | None = None
    host_name: str | None = None
    node_name: str | None = None
    bucket_start: datetime | None = Field(None, description="member_seconds: the UTC hour counted")
    seconds: int | None = Field(None, description="member_seconds: seconds the member was live in that hour (up to "
                                "the last pass, for the current hour)")
    job_id: str | None = None
    submit_time: datetime | None = None
    account: str | None = None
    runtime_user: str | None = None
    state: str | None = Field(None, description="job: the runtime's word for how it ended")
    start_time: datetime | None = None
    end_time: datetime | None = None
    elapsed_seconds: int | None = None
    cpus: int | None = None
    gpus: int | None = None
    memory_mb: int | None = None
    nodes: int | None = None
    core_seconds: int | None = Field(None, description="elapsed_seconds x cpus")
    gpu_seconds: int | None = Field(None, description="elapsed_seconds x gpus")
    memory_mb_seconds: int | None = Field(None, description="elapsed_seconds x memory_mb")
    recorded_at: datetime
    updated_at: datetime


class Totals(BaseModel):
    records: int = 0
    unattributed_records: int = 0
    seconds: int = Field(0, description="member_seconds: seconds members were live; job: elapsed seconds")
    core_seconds: int = 0
    gpu_seconds: int = 0
    memory_mb_seconds: int = 0


class ProjectUsage(BaseModel):
    project_id: UUID
    start: datetime
    end: datetime
    totals: dict[Dimension, Totals] = Field(description="per dimension, for the whole window (every page, whatever "
                                            "the dimension filter)")
    items: list[UsageRecord]
    next_cursor: str | None = Field(None, description="opaque; pass as `cursor` to get the next page, null on the "
                                    "last page")


class UsageLine(Totals):
    project_id: UUID
    project_name: str
    charged_as: ChargedAs
    dimension: Dimension


class TenantUsage(BaseModel):
    tenant_id: UUID
    start: datetime
    end: datetime
    totals: dict[Dimension, Totals]
    by_charged_as: dict[ChargedAs, dict[Dimension, Totals]]
    lines: list[UsageLine] = Field(description="per project, charged_as and dimension")

# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Who is charged for an instance's usage (seed 003, "Billing attribution"): the one rule, used by the metering
pass and by the billing-split preview a tenant admin sees before a deploy.

- A member contributed by another project (source_project_id set, and not the instance's own project) is charged to
  that project, as `project`.
- Every other member (the controller, capacity the instance's own project placed) is charged to the instance's own
  project: as `project` for a project-scope instance, flagged `tenant_shared_owner` for a tenant-shared runtime
  (control_plane_scope 'tenant'), whose own project is the shared runtime's owner record.
- A job is charged to the project whose runtime account it ran in (access.service.account_name) among the projects
  the instance serves or served: its own project, and for a tenant-shared runtime every project ever attached
  (detached ones too: a job they ran before is still theirs), as `project`. A job of any other account is charged
  like the instance's own members, with `unattributed` set.

Never an allocation's GPU-hours: those are billed by the allocation; these records are the app dimension beside
them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal
from uuid import UUID

import psycopg

from ..access.service import account_name
from ..sharing import scope

ChargedAs = Literal["project", "tenant_shared_owner"]


@dataclass(frozen=True)
class Charge:
    project_id: UUID
    charged_as: ChargedAs
    unattributed: bool = False


def _own(instance: Mapping[str, Any]) -> Charge:
    shared = instance["control_plane_scope"] == "tenant"
    return Charge(instance["project_id"], "tenant_shared_owner" if shared else "project")


def charged_to(instance: Mapping[str, Any], member: Mapping[str, Any]) -> Charge:
    """The charge of a member's time. `instance`: an app_instances row (project_id, control_plane_scope); `member`:
    an app_instance_members row, or a planned member, with source_project_id (absent or None: the instance's own
    project)."""
    source = member.get("source_project_id")
    if source is not None and source != instance["project_id"]:
        return Charge(source, "project")
    return _own(instance)


def job_charged_to(instance: Mapping[str, Any], account: str, projects_by_account: Mapping[str, UUID]) -> Charge:
    """The charge of a job that ran in `account`; `projects_by_account` is accounts(conn, instance)."""
    project_id = projects_by_account.get(account)
    if project_id is not None:
        return Charge(project_id, "project")
    return replace(_own(instance), unattributed=True)


def accounts(conn: psycopg.Connection, instance: Mapping[str, Any]) -> dict[str, UUID]:
    """Runtime account -> project, for the projects whose jobs the instance runs or ran: its own project, and for a
    tenant-shared runtime every project attached to it, detached ones included."""
    return {account_name(p): p["id"] for p in scope.attached_projects(conn, dict(instance), with_detached=True)}

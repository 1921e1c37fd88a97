"""Names to ids, through the public API only: projects, instances, members and allocations may be
named by id or by name. A name that matches nothing, or more than one thing, is a ClientError that
says which."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from .errors import ClientError

if TYPE_CHECKING:
    from .http import Client


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def visible_projects(client: Client) -> list[dict]:
    """The projects whose instances the token may read (from GET /v1/me): its own project (a service
    account), projects it has a role in, and every project of a tenant it administers."""
    me = client.get("/v1/me")
    project_ids, tenant_ids = set(), set()
    if me.get("project_id"):
        project_ids.add(me["project_id"])
    for grant in me.get("grants", []):
        if "apps.instance.read" not in grant.get("permissions", []):
            continue
        if grant.get("scope_kind") == "project" and grant.get("project_id"):
            project_ids.add(grant["project_id"])
        elif grant.get("scope_kind") == "tenant" and grant.get("tenant_id"):
            tenant_ids.add(grant["tenant_id"])
    projects = {p["id"]: p for tenant in sorted(tenant_ids) for p in client.pages(f"/v1/tenants/{tenant}/projects")}
    for project_id in sorted(project_ids - projects.keys()):
        projects[project_id] = client.get(f"/v1/projects/{project_id}")
    return sorted(projects.values(), key=lambda p: (p["name"], p["id"]))


def project(client: Client, ref: str) -> dict:
    """A project by id or by name (a name among the visible projects)."""
    if is_uuid(ref):
        return client.get(f"/v1/projects/{ref}")
    named = [p for p in visible_projects(client) if p["name"] == ref]
    if not named:
        raise ClientError(f"no project named {ref} that this token may read")
    if len(named) > 1:
        raise ClientError(f"more than one project is named {ref}: {', '.join(p['id'] for p in named)}; pass its id")
    return named[0]


def projects(client: Client, ref: str | None) -> list[dict]:
    """The named project, or every visible project when none is named."""
    if ref:
        return [project(client, ref)]
    found = visible_projects(client)
    if not found:
        raise ClientError("this token may read no project's instances; name one with --project")
    return found


def instance(client: Client, ref: str, project_ref: str | None = None) -> dict:
    """An instance by id, or by name within the project (default: every visible project)."""
    if is_uuid(ref):
        return client.get(f"/v1/instances/{ref}")
    matches = [i for p in projects(client, project_ref) for i in client.pages(f"/v1/projects/{p['id']}/instances")
               if i["name"] == ref]
    if not matches:
        where = f"project {project_ref}" if project_ref else "the projects this token may read"
        raise ClientError(f"no instance named {ref} in {where}")
    if len(matches) > 1:
        where = ", ".join(i["project_id"] for i in matches)
        raise ClientError(f"instances named {ref} exist in several projects ({where}); pass --project")
    return matches[0]


def members(client: Client, instance_id: str) -> list[dict]:
    return list(client.pages(f"/v1/instances/{instance_id}/members"))


def member(client: Client, instance_obj: dict, ref: str) -> dict:
    """A member by id, node name or host name (removed members only by id)."""
    if is_uuid(ref):
        return client.get(f"/v1/instances/{instance_obj['id']}/members/{ref}")
    matches = [m for m in members(client, instance_obj["id"])
               if m["status"] != "removed" and ref in (m["node_name"], m["host_name"])]
    if not matches:
        raise ClientError(f"instance {instance_obj['name']} has no member {ref} (node or host name)")
    if len(matches) > 1:
        raise ClientError(f"{ref} names several members of {instance_obj['name']}: "
                          f"{', '.join(m['id'] for m in matches)}; pass an id")
    return matches[0]


def allocation(client: Client, project_id: str, ref: str) -> str:
    """An allocation's id, by id or by name among the project's allocations."""
    if is_uuid(ref):
        return ref
    matches = [a for a in client.pages(f"/v1/projects/{project_id}/allocations")
               if a["name"] == ref and not a.get("released_at")]
    if len(matches) != 1:
        raise ClientError(f"no allocation named {ref} in project {project_id}" if not matches else
                          f"several allocations are named {ref}; pass an id")
    return matches[0]["id"]

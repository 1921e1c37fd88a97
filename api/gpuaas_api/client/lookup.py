"""Names to ids, through the public API only: projects, instances, members, allocations and SSH keys
may be named by id or by name, operations by id; and every id by any unique prefix of it (as git and podman
take them), so the short ids people copy from the output work. A full id is used as is; a prefix
is looked up in the lists the token may read, after the names. A name or prefix that matches
nothing, or more than one thing, is a ClientError that says which."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
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


def is_id_prefix(ref: str) -> bool:
    """Whether `ref` may be the start of an id (a hex digit, then hex digits and dashes)."""
    return re.fullmatch(r"[0-9a-f][0-9a-f-]*", ref.lower()) is not None


def named(kind: str, ref: str, items: Iterable[dict], by_name: Callable[[dict], bool]) -> list[dict]:
    """The items `ref` names: those whose name it is, else those whose id starts with it. A name wins
    over a prefix (as a branch over an abbreviated commit in git); a prefix that starts several ids is
    an error that lists them."""
    items = list(items)
    matches = [item for item in items if by_name(item)]
    if matches or not is_id_prefix(ref):
        return matches
    matches = [item for item in items if item["id"].startswith(ref.lower())]
    if len(matches) > 1:
        raise ClientError(f"{kind} id prefix {ref} is ambiguous: matches {', '.join(sorted(m['id'] for m in matches))}")
    return matches


def _or_prefix(ref: str) -> str:
    """For "no such" messages: what `ref` was looked up as besides a name."""
    return f" or with an id starting {ref}" if is_id_prefix(ref) else ""


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
    """A project by id, by name or by id prefix (among the visible projects)."""
    if is_uuid(ref):
        return client.get(f"/v1/projects/{ref}")
    matches = named("project", ref, visible_projects(client), lambda p: p["name"] == ref)
    if not matches:
        raise ClientError(f"no project named {ref}{_or_prefix(ref)} that this token may read")
    if len(matches) > 1:
        raise ClientError(f"more than one project is named {ref}: {', '.join(p['id'] for p in matches)}; pass its id")
    return matches[0]


def projects(client: Client, ref: str | None) -> list[dict]:
    """The named project, or every visible project when none is named."""
    if ref:
        return [project(client, ref)]
    found = visible_projects(client)
    if not found:
        raise ClientError("this token may read no project's instances; name one with --project")
    return found


def instance(client: Client, ref: str, project_ref: str | None = None) -> dict:
    """An instance by id, or by name or id prefix within the project (default: every visible project)."""
    if is_uuid(ref):
        return client.get(f"/v1/instances/{ref}")
    matches = named("instance", ref, instances(client, project_ref), lambda i: i["name"] == ref)
    if not matches:
        raise ClientError(f"no instance named {ref}{_or_prefix(ref)} in {_where(project_ref)}")
    if len(matches) > 1:
        where = ", ".join(i["project_id"] for i in matches)
        raise ClientError(f"instances named {ref} exist in several projects ({where}); pass --project")
    return matches[0]


def instances(client: Client, project_ref: str | None) -> Iterable[dict]:
    return (i for p in projects(client, project_ref) for i in client.pages(f"/v1/projects/{p['id']}/instances"))


def _where(project_ref: str | None) -> str:
    return f"project {project_ref}" if project_ref else "the projects this token may read"


def operation_id(client: Client, ref: str, project_ref: str | None = None) -> str:
    """An operation's id: `ref` itself when it is one, else the one id it starts among the operations
    of the project's instances (default: of every visible project; no route lists operations across
    instances)."""
    if is_uuid(ref):
        return ref
    if not is_id_prefix(ref):
        raise ClientError(f"{ref} is not an operation id (nor the start of one)")
    ops = (op for i in instances(client, project_ref) for op in client.pages(f"/v1/instances/{i['id']}/operations"))
    matches = named("operation", ref, ops, lambda op: False)  # operations have no name
    if not matches:
        raise ClientError(f"no operation with an id starting {ref} in {_where(project_ref)}")
    return matches[0]["id"]


def members(client: Client, instance_id: str) -> list[dict]:
    return list(client.pages(f"/v1/instances/{instance_id}/members"))


def member(client: Client, instance_obj: dict, ref: str) -> dict:
    """A member by id, node name, host name or id prefix (removed members only by id or prefix)."""
    if is_uuid(ref):
        return client.get(f"/v1/instances/{instance_obj['id']}/members/{ref}")
    matches = named("member", ref, members(client, instance_obj["id"]),
                    lambda m: m["status"] != "removed" and ref in (m["node_name"], m["host_name"]))
    if not matches:
        raise ClientError(f"instance {instance_obj['name']} has no member {ref} (node or host name"
                          + (", or id prefix)" if is_id_prefix(ref) else ")"))
    if len(matches) > 1:
        raise ClientError(f"{ref} names several members of {instance_obj['name']}: "
                          f"{', '.join(m['id'] for m in matches)}; pass an id")
    return matches[0]


def allocation(client: Client, project_id: str, ref: str) -> str:
    """An allocation's id, by id, or by name or id prefix among the project's allocations in use."""
    if is_uuid(ref):
        return ref
    in_use = (a for a in client.pages(f"/v1/projects/{project_id}/allocations") if not a.get("released_at"))
    matches = named("allocation", ref, in_use, lambda a: a["name"] == ref)
    if len(matches) != 1:
        raise ClientError(f"no allocation named {ref}{_or_prefix(ref)} in project {project_id}" if not matches else
                          f"several allocations are named {ref}; pass an id")
    return matches[0]["id"]


def ssh_key(client: Client, ref: str) -> dict:
    """One of the caller's SSH keys, by id, by name or by id prefix."""
    keys = client.get("/v1/me/ssh-keys")["items"]
    matches = [k for k in keys if k["id"] == ref] or named("SSH key", ref, keys, lambda k: k["name"] == ref)
    if not matches:
        raise ClientError(f"you have no SSH key named {ref}{_or_prefix(ref)}")
    return matches[0]

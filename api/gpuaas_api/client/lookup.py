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


def visible_projects(client: Client, permission: str = "apps.instance.read") -> list[dict]:
    """The projects in which the token holds `permission` (default: those whose instances it may read), from GET
    /v1/me: its own project (a service account), projects it has a role in, every project of a tenant it
    administers, and of every tenant for a platform grant (a platform admin's projects, not their instances)."""
    me = client.get("/v1/me")
    project_ids, tenant_ids = set(), set()
    if me.get("project_id"):
        project_ids.add(me["project_id"])
    for grant in me.get("grants", []):
        if permission not in grant.get("permissions", []):
            continue
        if grant.get("scope_kind") == "project" and grant.get("project_id"):
            project_ids.add(grant["project_id"])
        elif grant.get("scope_kind") == "tenant" and grant.get("tenant_id"):
            tenant_ids.add(grant["tenant_id"])
        elif grant.get("scope_kind") == "platform":
            tenant_ids |= {t["id"] for t in client.pages("/v1/tenants")}
    projects = {p["id"]: p for tenant in sorted(tenant_ids) for p in client.pages(f"/v1/tenants/{tenant}/projects")}
    for project_id in sorted(project_ids - projects.keys()):
        projects[project_id] = client.get(f"/v1/projects/{project_id}")
    return sorted(projects.values(), key=lambda p: (p["name"], p["id"]))


def project(client: Client, ref: str) -> dict:
    """A project by id, by name or by id prefix (among the projects the token may read)."""
    if is_uuid(ref):
        return client.get(f"/v1/projects/{ref}")
    matches = named("project", ref, visible_projects(client, "iam.project.read"), lambda p: p["name"] == ref)
    if not matches:
        raise ClientError(f"no project named {ref}{_or_prefix(ref)} that this token may read")
    if len(matches) > 1:
        raise ClientError(f"more than one project is named {ref}: {', '.join(p['id'] for p in matches)}; pass its id")
    return matches[0]


def projects(client: Client, ref: str | None, permission: str = "apps.instance.read") -> list[dict]:
    """The named project, or every project in which the token holds `permission` when none is named (default:
    whose instances it may read)."""
    if ref:
        return [project(client, ref)]
    found = visible_projects(client, permission)
    if not found:
        what = "project's instances" if permission == "apps.instance.read" else "project"
        raise ClientError(f"this token may read no {what}; name one with --project")
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


def one(kind: str, ref: str, items: Iterable[dict], by_name: Callable[[dict], bool], where: str) -> dict:
    """The one item `ref` names among `items`: by name, else by id (or any unique start of it)."""
    matches = named(kind, ref, items, by_name)
    if not matches:
        raise ClientError(f"no {kind} named {ref}{_or_prefix(ref)} in {where}")
    if len(matches) > 1:
        raise ClientError(f"several {kind}s are named {ref} in {where}: {', '.join(m['id'] for m in matches)}; "
                          "pass an id")
    return matches[0]


def me(client: Client) -> dict:
    return client.get("/v1/me")


def tenants(client: Client) -> list[dict]:
    """The tenants the token may read: every tenant for a platform admin, else its own."""
    from .errors import ApiError

    try:
        return list(client.pages("/v1/tenants"))
    except ApiError as exc:
        own = me(client).get("tenant_id")
        if exc.status != 403 or not own:
            raise
        return [client.get(f"/v1/tenants/{own}")]


def tenant_id(client: Client, ref: str | None) -> str:
    """A tenant's id, by id, name or id prefix; by default the token's own tenant."""
    if ref is None:
        own = me(client).get("tenant_id")
        if not own:
            raise ClientError("this token belongs to no tenant: pass --tenant")
        return own
    if is_uuid(ref):
        return ref
    return one("tenant", ref, tenants(client), lambda t: t["name"] == ref, "the tenants this token may read")["id"]


def tenant_ids(client: Client, ref: str | None) -> list[str]:
    """The named tenant; by default the token's own, or every tenant for a token of none (a platform admin)."""
    if ref is None and not me(client).get("tenant_id"):
        return [t["id"] for t in tenants(client)]
    return [tenant_id(client, ref)]


def user(client: Client, ref: str, tenant_ref: str | None = None) -> dict:
    """A user by id, e-mail or id prefix among the users of the tenant (by default the token's own; for a token of
    no tenant, a platform admin's, of every tenant)."""
    if is_uuid(ref):
        return client.get(f"/v1/users/{ref}")
    found = (u for tenant in tenant_ids(client, tenant_ref) for u in client.pages(f"/v1/tenants/{tenant}/users"))
    return one("user", ref, found, lambda u: u["email"] == ref, f"tenant {tenant_ref}" if tenant_ref else
               "the tenants this token may read")


def service_account(client: Client, ref: str, project_ref: str | None = None) -> dict:
    """A service account by id, name or id prefix in the project (default: every project the token may read),
    or as PROJECT/NAME."""
    owner, _, name = ref.rpartition("/")
    if owner:
        found = project(client, owner)
        matches = [sa for sa in client.pages(f"/v1/projects/{found['id']}/service-accounts") if sa["name"] == name]
        if not matches:
            raise ClientError(f"project {found['name']} has no service account named {name}")
        return matches[0]
    accounts = (sa for p in projects(client, project_ref, "iam.project.read")
                for sa in client.pages(f"/v1/projects/{p['id']}/service-accounts"))
    return one("service account", ref, accounts, lambda sa: sa["name"] == ref, _where(project_ref))


def allocation_in(client: Client, ref: str, project_ref: str | None = None) -> dict:
    """An allocation (released ones too) by id, name or id prefix in the project (default: every project the token
    may read); a name is taken among the allocations in use."""
    if is_uuid(ref):
        return client.get(f"/v1/allocations/{ref}")
    found = [a for p in projects(client, project_ref, "allocations.read")
             for a in client.pages(f"/v1/projects/{p['id']}/allocations", include_released="true")]
    return one("allocation", ref, found, lambda a: a["name"] == ref and not a.get("released_at"), _where(project_ref))


def by_id(kind: str, ref: str, items: Iterable[dict], where: str) -> dict:
    """An item with no name (a role binding, a policy overlay, a grant) by its id or any unique start of it."""
    if not is_id_prefix(ref):
        raise ClientError(f"{ref} is not a {kind} id (nor the start of one)")
    return one(kind, ref, items, lambda _: False, where)

"""`gpuaas allocations|entitlements|policies`: what a project may use: the hosts allocated to it, the apps it is
entitled to, and the policy overlays that allow or deny regions, shapes, SKUs and registries (docs/cli.md)."""

from __future__ import annotations

import argparse

from ..client.verbs import Verb, arg, project, resource, tenant


def host(value: str) -> dict:
    """argparse type of --host NAME=ADDRESS."""
    name, _, address = value.partition("=")
    if not name or not address:
        raise argparse.ArgumentTypeError(f"{value!r} is not NAME=ADDRESS")
    return {"name": name, "address": address}


def _hosts(client, hosts: list[dict], args) -> list[dict]:
    return [h | {"ssh_user": args.ssh_user, "ssh_port": args.ssh_port} for h in hosts]


def _allocation(client, ref, args) -> str:
    from ..client import lookup
    from ..client.cli import project_ref

    return lookup.allocation_in(client, ref, project_ref(args))["id"]


def _overlays(client):
    """Every overlay the token may read: global ones, its tenant's, and those of each project it may read."""
    from ..client import lookup
    from ..client.errors import ApiError

    scopes = [{"scope_kind": "global"}]
    if own := lookup.me(client).get("tenant_id"):
        scopes.append({"scope_kind": "tenant", "tenant_id": own})
    scopes += [{"scope_kind": "project", "project_id": p["id"]}
               for p in lookup.visible_projects(client, "policy.overlay.read")]
    for scope in scopes:
        try:
            yield from client.pages("/v1/policy/overlays", **scope)
        except ApiError as exc:
            if exc.status != 403:
                raise


def _overlay(client, ref, args) -> str:
    from ..client import lookup

    return lookup.by_id("policy overlay", ref, _overlays(client), "the overlays this token may read")["id"]


def _scope(client, scope, args) -> str | None:
    """An overlay list's scope: as given, else the scope --project or --tenant names (else global)."""
    return scope or ("project" if args.project else "tenant" if args.tenant else None)


ALLOCATION_COLUMNS = ("name", "capacity_shape", "sku", "gpu_count", "region",
                      ("HOSTS", lambda a: ", ".join(h["name"] for h in a["hosts"])), "project_id", "released_at", "id")
NAMED_ALLOCATION = (arg("allocation", metavar="ALLOCATION", to="path", key="allocation_id", resolve=_allocation,
                        help="its id or name"),
                    arg("--project", metavar="ID|NAME", to="", help="the project to look the name up in (default: "
                                                                    "every project the token may read)"))
ALLOCATIONS = (
    Verb("list", "allocations_list", "GET", "/v1/projects/{project_id}/allocations", "a project's allocations",
         (project(each=True), arg("--include-released", action="store_true", to="query", help="released ones too")),
         ALLOCATION_COLUMNS),
    Verb("show", "allocations_get", "GET", "/v1/allocations/{allocation_id}", "one allocation", NAMED_ALLOCATION),
    Verb("create", "allocations_create", "POST", "/v1/allocations",
         "allocate hosts to a project (platform admins): the hosts its instances' members run on",
         (arg("name", metavar="NAME", help="lowercase letters, digits and -"), project(to="body"),
          arg("--shape", dest="capacity_shape", required=True, choices=("baremetal", "gpu_slice"),
              help="whole machines or GPU slices"),
          arg("--gpus", dest="gpu_count", type=int, required=True, metavar="N", help="GPUs per host"),
          arg("--region", required=True),
          arg("--sku", help="the hardware SKU, e.g. h100-8x"),
          arg("--exclusive", action=argparse.BooleanOptionalAction, default=None,
              help="hosts used by this project alone (default: yes for baremetal, no for gpu_slice)"),
          arg("--host", dest="hosts", action="append", type=host, required=True, metavar="NAME=ADDRESS",
              resolve=_hosts, help="a host and its address (repeatable)"),
          arg("--ssh-user", default="root", to="", help="the SSH user of every host (default root)"),
          arg("--ssh-port", type=int, default=22, to="", help="the SSH port of every host (default 22)")),
         ALLOCATION_COLUMNS),
    Verb("release", "allocations_release", "DELETE", "/v1/allocations/{allocation_id}",
         "release an allocation (refused while an instance's members use its hosts)", NAMED_ALLOCATION,
         ALLOCATION_COLUMNS),
)
ENTITLEMENT_COLUMNS = ("app_slug", "project_id", "created_at", "id")
ENTITLEMENTS = (
    Verb("list", "entitlements_list", "GET", "/v1/projects/{project_id}/entitlements",
         "the apps a project may create instances of", (project(each=True),), ENTITLEMENT_COLUMNS),
    Verb("create", "entitlements_create", "POST", "/v1/projects/{project_id}/entitlements",
         "entitle a project to an app (platform admins)",
         (arg("app_slug", metavar="APP", help="the app's slug (gpuaas apps list)"), project()), ENTITLEMENT_COLUMNS),
    Verb("delete", "entitlements_delete", "DELETE", "/v1/projects/{project_id}/entitlements/{app_slug}",
         "take an app's entitlement away from a project (its instances stay)",
         (arg("app_slug", metavar="APP", to="path"), project()), done="deleted the entitlement to {app_slug}"),
)
OVERLAY_COLUMNS = ("scope_kind", "tenant_id", "project_id", "dimension", "effect", "values", "created_at", "id")


POLICIES = (
    Verb("list", "policy_overlays_list", "GET", "/v1/policy/overlays", "policy overlays: what a scope allows or denies",
         (arg("--scope", dest="scope_kind", to="query", choices=("global", "tenant", "project"), resolve=_scope,
              help="the scope whose overlays to list (default: project with --project, tenant with --tenant, else "
                   "global)"), tenant(to="query", only=True), project(to="query", only=True)),
         OVERLAY_COLUMNS),
    Verb("create", "policy_overlays_create", "POST", "/v1/policy/overlays",
         "allow or deny values of a dimension, globally or for a tenant or a project",
         (arg("--scope", dest="scope_kind", required=True, choices=("global", "tenant", "project")),
          tenant(to="body", only=True), project(to="body", only=True),
          arg("--dimension", required=True, choices=("region", "capacity_shape", "sku", "artifact_registry")),
          arg("--effect", required=True, choices=("allow", "deny")),
          arg("values", nargs="+", metavar="VALUE", help="the values allowed or denied")), OVERLAY_COLUMNS),
    Verb("delete", "policy_overlays_delete", "DELETE", "/v1/policy/overlays/{overlay_id}", "remove a policy overlay",
         (arg("overlay", metavar="OVERLAY", to="path", key="overlay_id", resolve=_overlay,
              help="its id or any unique start of it"),), done="deleted policy overlay {overlay}"),
    Verb("effective", "policy_effective_get", "GET", "/v1/projects/{project_id}/policy/effective",
         "what a project may use after every overlay: each dimension's allow-list (- : anything) and deny-list",
         (project(),), ("dimension", ("ALLOW", lambda d: "-" if d["allow"] is None else ", ".join(d["allow"])),
                        "deny"), rows="dimensions"),
)


def register(sub: argparse._SubParsersAction) -> None:
    resource(sub, "allocations", "the hosts allocated to projects: list, show, create, release", ALLOCATIONS)
    resource(sub, "entitlements", "the apps a project may use: list, create, delete", ENTITLEMENTS)
    resource(sub, "policies", "policy overlays (regions, shapes, SKUs, registries): list, create, delete, effective",
             POLICIES)

"""`gpuaas registries`: a tenant's private registries (its tenant admin), whose images back the tenant's private apps
and whose credentials the tenant's runs pull with, and `gpuaas registries allowlist`: the registry hosts a platform
admin allows tenants to register (docs/control-service.md "Tenant-private registries"). A password is read from a
prompt, stdin or a file, never from the command line (where `ps` and the shell's history would keep it)."""

from __future__ import annotations

import argparse
import sys

from ..client.verbs import Keys, Verb, add, arg, resource, tenant


def _password(client, path: str | None, args) -> str:
    """The password from --password-file FILE, from stdin with --password-stdin, else asked at the terminal."""
    import getpass
    from pathlib import Path

    from ..client.errors import ClientError

    if path is not None:
        password = Path(path).read_text().rstrip("\n")
    elif args.password_stdin:
        password = sys.stdin.read().rstrip("\n")
    elif sys.stdin.isatty():
        password = getpass.getpass("registry password: ")
    else:
        raise ClientError("no password: pass --password-stdin or --password-file FILE (never on the command line)")
    if not password:
        raise ClientError("the password is empty")
    return password


def _registry(client, ref: str, args) -> Keys:
    """The tenant's registry by id, name or id prefix: its tenant's id and its own."""
    from ..client import lookup

    tenant_id = lookup.tenant_id(client, args.tenant)
    found = lookup.one("registry", ref, client.pages(f"/v1/tenants/{tenant_id}/registries"),
                       lambda r: r["name"] == ref, "the tenant's registries")
    return Keys(tenant_id=tenant_id, registry_id=found["id"])


COLUMNS = ("name", "host", "username", ("CREDENTIALS", lambda r: "set" if r["credentials_set"] else "-"),
           "credentials_rotated_at", "created_at", "id")
NAMED = (arg("registry", metavar="REGISTRY", to="path", resolve=_registry, help="its name or id"),
         arg("--tenant", metavar="ID|NAME", to="", help="the tenant (default: the token's own)"))
PASSWORD = (arg("--password-file", metavar="FILE", key="password", resolve=_password,
                help="read the password from FILE (default: ask at the terminal)"),
            arg("--password-stdin", action="store_true", to="", help="read the password from stdin"))
REGISTRIES = (
    Verb("list", "tenant_registries_list", "GET", "/v1/tenants/{tenant_id}/registries",
         "a tenant's private registries (never their passwords)", (tenant(each=True),), COLUMNS),
    Verb("add", "tenant_registries_create", "POST", "/v1/tenants/{tenant_id}/registries",
         "register a private registry of the tenant on an allowlisted host (tenant admins)",
         (arg("name", metavar="NAME", help="lowercase letters, digits and -"),
          arg("--host", required=True, metavar="HOST[:PORT]", help="the registry host, as image references name it"),
          arg("--username", required=True), *PASSWORD, tenant()), COLUMNS),
    Verb("show", "tenant_registries_get", "GET", "/v1/tenants/{tenant_id}/registries/{registry_id}",
         "one of the tenant's private registries", NAMED),
    Verb("rotate", "tenant_registries_rotate", "PUT", "/v1/tenants/{tenant_id}/registries/{registry_id}/credentials",
         "replace a registry's username and password; runs from now on pull with them",
         (*NAMED, arg("--username", required=True), *PASSWORD), COLUMNS),
    Verb("remove", "tenant_registries_delete", "DELETE", "/v1/tenants/{tenant_id}/registries/{registry_id}",
         "remove a registry and its password (runs of versions pinning its images then fail, saying why)", NAMED,
         COLUMNS),
)
ALLOWLIST_COLUMNS = ("host", "note", "added_by", "created_at")
HOST = arg("host", metavar="HOST[:PORT]", to="path", help="the registry host")
ALLOWLIST = (
    Verb("list", "registry_allowlist_list", "GET", "/v1/registries/allowlist",
         "the registry hosts tenants may register (platform admins)", (), ALLOWLIST_COLUMNS),
    Verb("add", "registry_allowlist_add", "POST", "/v1/registries/allowlist",
         "allow tenants to register a registry on a host (platform admins)",
         (arg("host", metavar="HOST[:PORT]"), arg("--note", default="", help="why (kept with the entry)")),
         ALLOWLIST_COLUMNS),
    Verb("show", "registry_allowlist_get", "GET", "/v1/registries/allowlist/{host}", "one allowlisted host", (HOST,)),
    Verb("remove", "registry_allowlist_remove", "DELETE", "/v1/registries/allowlist/{host}",
         "take a host off the allowlist (the tenants' registries there stay, unusable until it is allowed again)",
         (HOST,), ALLOWLIST_COLUMNS),
)


def register(sub: argparse._SubParsersAction) -> None:
    text = "a tenant's private registries: list, add, show, rotate, remove; allowlist (platform admins)"
    parser = sub.add_parser("registries", help=text, description=text)
    rsub = parser.add_subparsers(dest="registries_command", metavar="ACTION", required=True)
    for verb in REGISTRIES:
        add(rsub, verb)
    resource(rsub, "allowlist", "the registry hosts tenants may register: list, add, show, remove", ALLOWLIST)

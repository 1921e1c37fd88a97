"""`gpuaas tenants|projects|users|service-accounts|tokens|roles|bindings|whoami`: who may do what (docs/cli.md,
"Tenants, people and tokens"). Each verb is one route of the IAM API; every name may be an id, a name (an e-mail
for a user) or any unique start of an id."""

from __future__ import annotations

import argparse
import sys

from ..client.cli import command, emit, output_option, structured
from ..client.verbs import Keys, Verb, arg, project, project_id, resource, tenant, tenant_id

TOKEN_COLUMNS = ("name", "principal_kind", "created_at", "expires_at", "revoked_at", "last_used_at", "id")


def _user(client, ref, args):
    from ..client import lookup

    return lookup.user(client, ref, getattr(args, "tenant", None))


def _service_account(client, ref, args):
    from ..client import lookup
    from ..client.cli import project_ref

    return lookup.service_account(client, ref, project_ref(args))


def _sa_keys(client, ref, args) -> Keys:
    sa = _service_account(client, ref, args)
    return Keys(project_id=sa["project_id"], sa_id=sa["id"])


def _principal(client, ref, args):
    """--user or --service-account as the body's principal_kind and principal_id."""
    if ref is None:
        return None
    if args.user is not None:
        return Keys(principal_kind="user", principal_id=_user(client, ref, args)["id"])
    return Keys(principal_kind="service_account", principal_id=_service_account(client, ref, args)["id"])


def _binding_scope(client, ref, args):
    """A bindings list's tenant: --tenant, else the token's own unless --project names the scope (a platform
    admin's token, of no tenant: every binding)."""
    from ..client import lookup

    if args.project is not None:
        return None
    return lookup.tenant_id(client, ref) if ref is not None else lookup.me(client).get("tenant_id")


def _binding(client, ref, args):
    """A role binding by id or any unique start of it: among the token's tenant's (every one for a platform admin),
    else, for a project admin, among its projects'."""
    from ..client import lookup
    from ..client.errors import ApiError

    if lookup.is_uuid(ref):
        return ref
    try:
        found = list(client.pages("/v1/role-bindings", tenant_id=lookup.me(client).get("tenant_id")))
    except ApiError as exc:
        if exc.status != 403:
            raise
        found = [b for p in lookup.visible_projects(client, "iam.role_binding.read")
                 for b in client.pages("/v1/role-bindings", project_id=p["id"])]
    return lookup.by_id("role binding", ref, found, "the bindings this token may read")["id"]


# Where a name is looked up (the argument goes nowhere else).
TENANT_OF_NAME = arg("--tenant", metavar="ID|NAME", to="", help="the tenant to look the e-mail up in (default: the "
                                                                "token's own)")
PROJECT_OF_NAME = arg("--project", metavar="ID|NAME", to="", help="the project to look the name up in (default: "
                                                                  "every project the token may read)")
TENANT_COLUMNS = ("name", "display_name", "created_at", "id")
PROJECT_COLUMNS = ("name", "display_name", "tenant_id", "created_at", "id")
USER_COLUMNS = ("email", "display_name", "disabled", "created_at", "id")
SA_COLUMNS = ("name", "description", "disabled", "project_id", "created_at", "id")
BINDING_COLUMNS = ("role", "scope_kind", "principal_kind", "principal_id", "tenant_id", "project_id", "created_at",
                   "id")

TENANTS = (
    Verb("list", "tenants_list", "GET", "/v1/tenants", "every tenant (platform admins)", columns=TENANT_COLUMNS),
    Verb("show", "tenants_get", "GET", "/v1/tenants/{tenant_id}", "one tenant",
         (arg("tenant", metavar="TENANT", to="path", key="tenant_id", resolve=tenant_id, help="its id or name"),)),
    Verb("create", "tenants_create", "POST", "/v1/tenants", "create a tenant (platform admins)",
         (arg("name", metavar="NAME", help="lowercase letters, digits and -"),
          arg("--display-name", help="a name for people")), TENANT_COLUMNS),
)
PROJECTS = (
    Verb("list", "projects_list", "GET", "/v1/tenants/{tenant_id}/projects", "the projects of a tenant",
         (tenant(each=True),), PROJECT_COLUMNS),
    Verb("show", "projects_get", "GET", "/v1/projects/{project_id}", "one project",
         (arg("project", metavar="PROJECT", to="path", key="project_id", resolve=project_id,
              help="its id or name"),)),
    Verb("create", "projects_create", "POST", "/v1/tenants/{tenant_id}/projects", "create a project in a tenant",
         (arg("name", metavar="NAME", help="lowercase letters, digits and -"), tenant(),
          arg("--display-name", help="a name for people")), PROJECT_COLUMNS),
)
USERS = (
    Verb("list", "users_list", "GET", "/v1/tenants/{tenant_id}/users", "the users of a tenant",
         (tenant(each=True),), USER_COLUMNS),
    Verb("show", "users_get", "GET", "/v1/users/{user_id}", "one user",
         (arg("user", metavar="USER", to="path", key="user_id", resolve=lambda c, ref, a: _user(c, ref, a)["id"],
              help="its id or e-mail"), TENANT_OF_NAME),),
    Verb("create", "users_create", "POST", "/v1/tenants/{tenant_id}/users", "create a user in a tenant (then give "
         "it a role: gpuaas bindings create)",
         (arg("email", metavar="EMAIL"), tenant(), arg("--display-name", help="a name for people")), USER_COLUMNS),
)
SERVICE_ACCOUNTS = (
    Verb("list", "service_accounts_list", "GET", "/v1/projects/{project_id}/service-accounts",
         "the service accounts of a project", (project(each=True),), SA_COLUMNS),
    Verb("show", "service_accounts_get", "GET", "/v1/projects/{project_id}/service-accounts/{sa_id}",
         "one service account",
         (arg("service_account", metavar="SERVICE_ACCOUNT", to="path", resolve=_sa_keys,
              help="its id, name or PROJECT/NAME"), PROJECT_OF_NAME),),
    Verb("create", "service_accounts_create", "POST", "/v1/projects/{project_id}/service-accounts",
         "create a service account in a project (then a token: gpuaas tokens create --service-account)",
         (arg("name", metavar="NAME", help="lowercase letters, digits and -"), project(),
          arg("--description"),
          arg("--role", dest="roles", action="append", choices=("sa_operator", "sa_viewer"),
              help="its role in the project (repeatable; default sa_operator)")), SA_COLUMNS),
    Verb("disable", "service_accounts_disable", "DELETE", "/v1/projects/{project_id}/service-accounts/{sa_id}",
         "disable a service account: its tokens stop working, its runtime logins go",
         (arg("service_account", metavar="SERVICE_ACCOUNT", to="path", resolve=_sa_keys,
              help="its id, name or PROJECT/NAME"), PROJECT_OF_NAME), SA_COLUMNS),
)
ROLES = (
    Verb("list", "roles_list", "GET", "/v1/iam/roles", "the built-in roles, their scope and what they are for "
         "(-o yaml: the permissions of each)", columns=("name", "scope_kinds", "principal_kinds", "description")),
)
BINDINGS = (
    Verb("list", "role_bindings_list", "GET", "/v1/role-bindings", "role bindings: of a project, of a tenant and its "
         "projects (default: the token's tenant), or every one (platform admins)",
         (arg("--tenant", metavar="ID|NAME", to="query", key="tenant_id", resolve=_binding_scope,
              help="the tenant (default: the token's own)"),
          project(to="query", only=True)), BINDING_COLUMNS),
    Verb("create", "role_bindings_create", "POST", "/v1/role-bindings",
         "give a user or a service account a role, in a tenant (tenant roles) or a project (project roles)",
         (arg("role", metavar="ROLE", help="a role (gpuaas roles list)"),
          arg("--user", metavar="ID|EMAIL", exclusive="principal", required=True, resolve=_principal,
              help="the user"),
          arg("--service-account", metavar="ID|NAME|PROJECT/NAME", exclusive="principal", required=True,
              resolve=_principal, help="the service account"),
          tenant(to="body", only=True), project(to="body", only=True)), BINDING_COLUMNS),
    Verb("delete", "role_bindings_delete", "DELETE", "/v1/role-bindings/{binding_id}",
         "remove a role binding: its permissions end at once, runtime logins with the access sync it queues",
         (arg("binding", metavar="BINDING", to="path", key="binding_id", resolve=_binding,
              help="its id or any unique start of it"),), done="deleted role binding {binding}"),
)


def register(sub: argparse._SubParsersAction) -> None:
    resource(sub, "tenants", "tenants: list, show, create (platform admins)", TENANTS)
    resource(sub, "projects", "a tenant's projects: list, show, create", PROJECTS)
    resource(sub, "users", "a tenant's users: list, show, create", USERS)
    resource(sub, "service-accounts", "a project's service accounts: list, show, create, disable", SERVICE_ACCOUNTS)
    resource(sub, "roles", "the built-in roles", ROLES)
    resource(sub, "bindings", "role bindings: who has which role where; list, create, delete", BINDINGS)
    whoami = sub.add_parser("whoami", help="who the token is: kind, name, tenant, project, and each role it holds")
    output_option(whoami)
    whoami.set_defaults(func=show_me)
    _tokens(sub)


@command("me_get")
def show_me(args, client) -> int:
    from ..client.render import table

    me = client.get("/v1/me")
    if structured(args):
        emit(args, me)
        return 0
    print(f"{me['kind'].replace('_', ' ')} {me['name']}  {me['id']}")
    print(f"  tenant    {me.get('tenant_id') or '-'}")
    print(f"  project   {me.get('project_id') or '-'}")
    print()
    print(table(["ROLE", "SCOPE", "TENANT", "PROJECT", "PERMISSIONS"],
                [[g["role"], g["scope_kind"], g.get("tenant_id"), g.get("project_id"), len(g["permissions"])]
                 for g in me["grants"]]))
    return 0


# -- tokens: the caller's own, a user's or a service account's, by the same verbs --------------------------

def _tokens(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tokens", help="API tokens: yours (default), a user's or a service account's; list, create, "
                                      "revoke")
    tsub = p.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)

    def owner(parser: argparse.ArgumentParser) -> None:
        who = parser.add_mutually_exclusive_group()
        who.add_argument("--user", metavar="ID|EMAIL", help="a user's tokens (tenant admins)")
        who.add_argument("--service-account", metavar="ID|NAME|PROJECT/NAME",
                         help="a service account's tokens (its project's admins)")
        parser.add_argument("--project", metavar="ID|NAME", help="the service account's project")
        parser.add_argument("--tenant", metavar="ID|NAME", help="the user's tenant (default: the token's own)")
        output_option(parser)

    ls = tsub.add_parser("list", help="the tokens (never their secrets): created, expires, revoked, last used")
    owner(ls)
    ls.set_defaults(func=list_tokens)
    create = tsub.add_parser("create", help="issue a token; its secret is printed once, on standard output")
    create.add_argument("name", metavar="NAME", help="what the token is for (e.g. ci)")
    create.add_argument("--expires-in-days", type=int, metavar="N",
                        help="days until it expires (default: the service's, clipped to the caps)")
    owner(create)
    create.set_defaults(func=create_token)
    revoke = tsub.add_parser("revoke", help="revoke a token: it stops working at once")
    revoke.add_argument("token", metavar="TOKEN", help="its id, any unique start of it, or its name")
    owner(revoke)
    revoke.set_defaults(func=revoke_token)
    revoke_all = tsub.add_parser("revoke-all", help="revoke every token of a user (tenant admins)")
    revoke_all.add_argument("--user", metavar="ID|EMAIL", required=True)
    revoke_all.add_argument("--tenant", metavar="ID|NAME", help="the user's tenant (default: the token's own)")
    output_option(revoke_all)
    revoke_all.set_defaults(func=revoke_all_tokens)


def _owner_path(client, args) -> str:
    """The route prefix of the tokens of --user, --service-account, or the caller."""
    if args.user:
        return f"/v1/users/{_user(client, args.user, args)['id']}/tokens"
    if args.service_account:
        sa = _service_account(client, args.service_account, args)
        return f"/v1/projects/{sa['project_id']}/service-accounts/{sa['id']}/tokens"
    return "/v1/me/tokens"


@command("me_tokens_list", "users_tokens_list", "service_accounts_tokens_list")
def list_tokens(args, client) -> int:
    from ..client.verbs import rows_table

    tokens = list(client.pages(_owner_path(client, args)))
    if structured(args):
        emit(args, tokens)
    else:
        print(rows_table(TOKEN_COLUMNS, tokens))
    return 0


@command("me_tokens_create", "users_tokens_create", "service_accounts_tokens_create")
def create_token(args, client) -> int:
    body = {"name": args.name} | ({"expires_in_days": args.expires_in_days} if args.expires_in_days else {})
    issued = client.post(_owner_path(client, args), body)
    if structured(args):
        emit(args, issued)
        return 0
    # The secret alone on stdout (`TOKEN=$(gpuaas tokens create ci)`), what it is on stderr.
    print(issued["token"])
    print(f"token {issued['name']} ({issued['id']}) of {issued['principal_kind'].replace('_', ' ')} "
          f"{issued['principal_id']}, expires {issued['expires_at']}; the secret above is shown only once",
          file=sys.stderr)
    return 0


@command("me_tokens_revoke", "tokens_revoke")
def revoke_token(args, client) -> int:
    from ..client import lookup
    from ..client.verbs import rows_table

    path = _owner_path(client, args)
    token = lookup.one("token", args.token, client.pages(path), lambda t: t["name"] == args.token,
                       "the tokens listed")
    # Your own through /v1/me (any principal may revoke its own); another's through the admin route.
    revoked = client.delete(f"{path}/{token['id']}" if path == "/v1/me/tokens" else f"/v1/tokens/{token['id']}")
    if structured(args):
        emit(args, revoked)
    else:
        print(rows_table(TOKEN_COLUMNS, [revoked]))
    return 0


@command("users_tokens_revoke_all")
def revoke_all_tokens(args, client) -> int:
    user = _user(client, args.user, args)
    done = client.delete(f"/v1/users/{user['id']}/tokens")
    if structured(args):
        emit(args, done)
    else:
        print(f"revoked {done['revoked']} token(s) of {user['email']}")
    return 0

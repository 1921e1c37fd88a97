from __future__ import annotations

from uuid import UUID

from .. import docs, errors
from ..access import service as access
from ..audit import service as audit
from ..common import Page, decode_cursor, keyset_page, page_of
from ..deps import DB, AppSettings, Caller, CursorParam, LimitParam, RunSettings, router
from ..errors import not_found
from ..location import LocatedRoute
from . import service
from .permissions import ROLES
from .schemas import (
    Me,
    Project,
    ProjectCreate,
    RoleBinding,
    RoleBindingCreate,
    RoleInfo,
    ScopedPermissions,
    ServiceAccount,
    ServiceAccountCreate,
    Tenant,
    TenantCreate,
    TokenCreate,
    TokenInfo,
    TokenIssued,
    TokensRevoked,
    User,
    UserCreate,
)

api = router("iam")
api.route_class = LocatedRoute  # Location on 201/202 (gpuaas_api.location)


# --- caller -------------------------------------------------------------------------------------

@api.get("/v1/me", operation_id="me_get", response_model=Me)
def whoami(caller: Caller):
    """The caller: kind, id, name, tenant and project, and the permissions each of its role bindings grants."""
    grants = [ScopedPermissions(role=b.role, scope_kind=b.scope_kind, tenant_id=b.tenant_id,
                                project_id=b.project_id, permissions=sorted(ROLES[b.role].permissions))
              for b in caller.bindings if b.role in ROLES]
    return Me(kind=caller.kind, id=caller.id, name=caller.name, tenant_id=caller.tenant_id,
              project_id=caller.project_id, grants=grants)


@api.get("/v1/me/tokens", operation_id="me_tokens_list", response_model=Page[TokenInfo])
def list_my_tokens(caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    """The caller's own API tokens (never their secrets), newest first."""
    with db.transaction() as conn:
        rows = conn.execute(
            """SELECT * FROM api_tokens WHERE principal_kind = %s AND principal_id = %s AND seq > %s
               ORDER BY seq LIMIT %s""",
            (caller.kind, caller.id, decode_cursor(cursor) or 0, limit + 1),
        ).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.post("/v1/me/tokens", operation_id="me_tokens_create",
          openapi_extra=docs.example({'name': 'ci-pipeline', 'expires_in_days': 30}),
          responses=errors.responses("token_lifetime_exceeded", "quota_exceeded"),
          response_model=TokenIssued, status_code=201)
def create_my_token(body: TokenCreate, caller: Caller, db: DB, settings: AppSettings):
    """A new token for the caller; it never outlives the token that asks for it. A principal holds at most
    `token_max_live_per_principal` live tokens (429 quota_exceeded: revoke one to mint another)."""
    with db.transaction() as conn:
        row, token = service.issue_token(conn, settings, caller.kind, caller.id, body.name, body.expires_in_days,
                                         not_after=caller.token_expires_at)
        audit.record(conn, caller, "iam.token.create", "token", row["id"],
                     after={"principal_kind": caller.kind, "principal_id": caller.id, "name": body.name},
                     context={"tenant_id": caller.tenant_id, "project_id": caller.project_id})
    return {**row, "token": token}


@api.delete("/v1/me/tokens/{token_id}", operation_id="me_tokens_revoke", response_model=TokenInfo)
def revoke_my_token(token_id: UUID, caller: Caller, db: DB):
    """Revoke one of the caller's own tokens; it stops working at once."""
    with db.transaction() as conn:
        return service.revoke_token(conn, caller, token_id, own=True)


@api.get("/v1/iam/roles", operation_id="roles_list", response_model=list[RoleInfo])
def list_roles(caller: Caller):
    """The built-in roles and the permissions each grants."""
    return [RoleInfo(name=r.name, scope_kinds=list(r.scope_kinds), principal_kinds=list(r.principal_kinds),
                     description=r.description, permissions=sorted(r.permissions)) for r in ROLES.values()]


# --- tenants and projects -----------------------------------------------------------------------

@api.post("/v1/tenants", operation_id="tenants_create", response_model=Tenant, status_code=201,
          openapi_extra=docs.example({'name': 'acme', 'display_name': 'ACME Research'}),
          responses=errors.responses("tenant_name_namespace"))
def create_tenant(body: TenantCreate, caller: Caller, db: DB):
    """Create a tenant (platform administrators only). Its name is no existing tenant's name and a dash followed
    by more, nor the start of one (409 tenant_name_namespace): private app slugs start with `<tenant name>-`."""
    caller.require("iam.tenant.create")
    with db.transaction() as conn:
        service.check_tenant_name(conn, body.name)
        row = conn.execute("INSERT INTO tenants (name, display_name) VALUES (%s, %s) RETURNING *",
                           (body.name, body.display_name or body.name)).fetchone()
        audit.record(conn, caller, "iam.tenant.create", "tenant", row["id"], after=row,
                     context={"tenant_id": row["id"]})
    return row


@api.get("/v1/tenants", operation_id="tenants_list", response_model=Page[Tenant])
def list_tenants(caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    """The tenants the caller may read, newest first."""
    caller.require("iam.tenant.read")  # all tenants: platform scope only
    with db.transaction() as conn:
        return keyset_page(conn, "tenants", cursor, limit)


@api.get("/v1/tenants/{tenant_id}", operation_id="tenants_get", response_model=Tenant)
def get_tenant(tenant_id: UUID, caller: Caller, db: DB):
    """One tenant."""
    with db.transaction() as conn:
        row = service.get_tenant(conn, tenant_id)
    caller.require("iam.tenant.read", tenant_id=tenant_id)
    return row


@api.post("/v1/tenants/{tenant_id}/projects", operation_id="projects_create", response_model=Project, status_code=201,
          openapi_extra=docs.example({'name': 'vision', 'display_name': 'Vision models'}))
def create_project(tenant_id: UUID, body: ProjectCreate, caller: Caller, db: DB):
    """Create a project in a tenant; its slug is unique within the tenant (409 already_exists)."""
    with db.transaction() as conn:
        service.get_tenant(conn, tenant_id)
        caller.require("iam.project.create", tenant_id=tenant_id)
        row = conn.execute(
            "INSERT INTO projects (tenant_id, name, display_name) VALUES (%s, %s, %s) RETURNING *",
            (tenant_id, body.name, body.display_name or body.name),
        ).fetchone()
        audit.record(conn, caller, "iam.project.create", "project", row["id"], after=row,
                     context={"tenant_id": tenant_id, "project_id": row["id"]})
    return row


@api.get("/v1/tenants/{tenant_id}/projects", operation_id="projects_list", response_model=Page[Project])
def list_projects(tenant_id: UUID, caller: Caller, db: DB, cursor: CursorParam = None,
                  limit: LimitParam = 50):
    """The tenant's projects the caller may read, newest first."""
    with db.transaction() as conn:
        service.get_tenant(conn, tenant_id)
        caller.require("iam.project.read", tenant_id=tenant_id)
        return keyset_page(conn, "projects", cursor, limit, tenant_id=tenant_id)


@api.get("/v1/projects/{project_id}", operation_id="projects_get", response_model=Project)
def get_project(project_id: UUID, caller: Caller, db: DB):
    """One project."""
    with db.transaction() as conn:
        row = service.get_project(conn, project_id)
    caller.require("iam.project.read", tenant_id=row["tenant_id"], project_id=project_id)
    return row


# --- users --------------------------------------------------------------------------------------

@api.post("/v1/tenants/{tenant_id}/users", operation_id="users_create", response_model=User, status_code=201,
          openapi_extra=docs.example({'email': 'ada@acme.example', 'display_name': 'Ada Lovelace'}))
def create_user(tenant_id: UUID, body: UserCreate, caller: Caller, db: DB):
    """Create a user in a tenant; its name is unique within the tenant (409 already_exists)."""
    with db.transaction() as conn:
        service.get_tenant(conn, tenant_id)
        caller.require("iam.user.create", tenant_id=tenant_id)
        row = service.create_user(conn, tenant_id, body.email, body.display_name)
        audit.record(conn, caller, "iam.user.create", "user", row["id"], after=row,
                     context={"tenant_id": tenant_id})
    return row


@api.get("/v1/tenants/{tenant_id}/users", operation_id="users_list", response_model=Page[User])
def list_users(tenant_id: UUID, caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    """The tenant's users, newest first."""
    with db.transaction() as conn:
        service.get_tenant(conn, tenant_id)
        caller.require("iam.user.read", tenant_id=tenant_id)
        return keyset_page(conn, "users", cursor, limit, tenant_id=tenant_id)


@api.get("/v1/users/{user_id}", operation_id="users_get", response_model=User)
def get_user(user_id: UUID, caller: Caller, db: DB):
    """One user."""
    with db.transaction() as conn:
        row = service.get_user(conn, user_id)
    if not (caller.kind == "user" and caller.id == user_id):
        caller.require("iam.user.read", tenant_id=row["tenant_id"])
    return row


@api.post("/v1/users/{user_id}/tokens", operation_id="users_tokens_create",
          openapi_extra=docs.example({'name': 'ci-pipeline', 'expires_in_days': 30}),
          responses=errors.responses("token_lifetime_exceeded", "quota_exceeded"),
          response_model=TokenIssued, status_code=201)
def create_user_token(user_id: UUID, body: TokenCreate, caller: Caller, db: DB, settings: AppSettings):
    """Issue an API token for a user; the secret is in this answer only."""
    with db.transaction() as conn:
        user = service.get_user(conn, user_id)
        caller.require("iam.token.create", tenant_id=user["tenant_id"])
        row, token = service.issue_token(conn, settings, "user", user_id, body.name, body.expires_in_days)
        audit.record(conn, caller, "iam.token.create", "token", row["id"],
                     after={"principal_kind": "user", "principal_id": user_id, "name": body.name},
                     context={"tenant_id": user["tenant_id"]})
    return {**row, "token": token}


@api.get("/v1/users/{user_id}/tokens", operation_id="users_tokens_list", response_model=Page[TokenInfo])
def list_user_tokens(user_id: UUID, caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    """A user's tokens (never the secrets), for the admins of the user's tenant and the platform."""
    with db.transaction() as conn:
        user = service.get_user(conn, user_id)
        caller.require("iam.token.read", tenant_id=user["tenant_id"])
        return keyset_page(conn, "api_tokens", cursor, limit, principal_kind="user", principal_id=user_id)


@api.delete("/v1/users/{user_id}/tokens", operation_id="users_tokens_revoke_all", response_model=TokensRevoked)
def revoke_user_tokens(user_id: UUID, caller: Caller, db: DB):
    """Revoke every live token of a user (a lost laptop, a leaver); open event streams end within
    the stream re-check interval."""
    with db.transaction() as conn:
        user = service.get_user(conn, user_id)
        caller.require("iam.token.revoke", tenant_id=user["tenant_id"])
        revoked = service.revoke_all_tokens(conn, "user", user_id)
        audit.record(conn, caller, "iam.token.revoke_all", "user", user_id, after={"revoked": revoked},
                     context={"tenant_id": user["tenant_id"]})
    return {"revoked": revoked}


@api.delete("/v1/tokens/{token_id}", operation_id="tokens_revoke", response_model=TokenInfo)
def revoke_token(token_id: UUID, caller: Caller, db: DB):
    """Revoke any token the caller administers; it stops working at once."""
    with db.transaction() as conn:
        return service.revoke_token(conn, caller, token_id, own=False)


# --- service accounts ---------------------------------------------------------------------------

@api.post("/v1/projects/{project_id}/service-accounts", operation_id="service_accounts_create",
          openapi_extra=docs.example({'name': 'ci', 'description': 'deploys from CI', 'roles': ['sa_operator']}),
          response_model=ServiceAccount, status_code=201)
def create_service_account(project_id: UUID, body: ServiceAccountCreate, caller: Caller, db: DB,
                           settings: RunSettings):
    """Create a service account in a project, for automation (CI, AWX). With a role that submits jobs it gets a
    runtime identity on the project's running instances (an access_sync is queued)."""
    with db.transaction() as conn:
        project = service.get_project(conn, project_id)
        caller.require("iam.service_account.create", tenant_id=project["tenant_id"], project_id=project_id)
        row = conn.execute(
            """INSERT INTO service_accounts (tenant_id, project_id, name, description)
               VALUES (%s, %s, %s, %s) RETURNING *""",
            (project["tenant_id"], project_id, body.name, body.description),
        ).fetchone()
        audit.record(conn, caller, "iam.service_account.create", "service_account", row["id"], after=row,
                     context={"tenant_id": project["tenant_id"], "project_id": project_id})
        for role in dict.fromkeys(body.roles):
            service.create_binding(conn, caller, "service_account", row["id"], role, None, project_id)
        access.queue_sync(conn, settings, caller, project_id=project_id, reason=f"service account {row['id']} created")
    return row


@api.get("/v1/projects/{project_id}/service-accounts", operation_id="service_accounts_list",
         response_model=Page[ServiceAccount])
def list_service_accounts(project_id: UUID, caller: Caller, db: DB, cursor: CursorParam = None,
                          limit: LimitParam = 50):
    """The project's service accounts, newest first."""
    with db.transaction() as conn:
        project = service.get_project(conn, project_id)
        caller.require("iam.service_account.read", tenant_id=project["tenant_id"], project_id=project_id)
        return keyset_page(conn, "service_accounts", cursor, limit, project_id=project_id)


@api.get("/v1/projects/{project_id}/service-accounts/{sa_id}", operation_id="service_accounts_get",
         response_model=ServiceAccount)
def get_service_account(project_id: UUID, sa_id: UUID, caller: Caller, db: DB):
    """One service account."""
    with db.transaction() as conn:
        project = service.get_project(conn, project_id)
        caller.require("iam.service_account.read", tenant_id=project["tenant_id"], project_id=project_id)
        return service.get_service_account(conn, sa_id, project_id)


@api.delete("/v1/projects/{project_id}/service-accounts/{sa_id}", operation_id="service_accounts_disable",
            response_model=ServiceAccount)
def disable_service_account(project_id: UUID, sa_id: UUID, caller: Caller, db: DB, settings: RunSettings):
    """Disables the account, revokes its tokens and removes its role bindings (rows stay for audit)."""
    with db.transaction() as conn:
        project = service.get_project(conn, project_id)
        caller.require("iam.service_account.delete", tenant_id=project["tenant_id"], project_id=project_id)
        before = service.get_service_account(conn, sa_id, project_id)
        row = conn.execute("UPDATE service_accounts SET disabled = true WHERE id = %s RETURNING *",
                           (sa_id,)).fetchone()
        service.revoke_all_tokens(conn, "service_account", sa_id)
        conn.execute("DELETE FROM role_bindings WHERE principal_kind = 'service_account' AND principal_id = %s",
                     (sa_id,))
        audit.record(conn, caller, "iam.service_account.delete", "service_account", sa_id, before=before,
                     after=row, context={"tenant_id": project["tenant_id"], "project_id": project_id})
        access.queue_sync(conn, settings, caller, project_id=project_id, reason=f"service account {sa_id} disabled")
    return row


@api.post("/v1/projects/{project_id}/service-accounts/{sa_id}/tokens", operation_id="service_accounts_tokens_create",
          openapi_extra=docs.example({'name': 'ci-pipeline', 'expires_in_days': 30}),
          responses=errors.responses("token_lifetime_exceeded", "quota_exceeded"),
          response_model=TokenIssued,
          status_code=201)
def create_service_account_token(project_id: UUID, sa_id: UUID, body: TokenCreate, caller: Caller, db: DB,
                                 settings: AppSettings):
    """Issue an API token for a service account; the secret is in this answer only."""
    with db.transaction() as conn:
        project = service.get_project(conn, project_id)
        caller.require("iam.service_account.token.create", tenant_id=project["tenant_id"], project_id=project_id)
        sa = service.get_service_account(conn, sa_id, project_id)
        if sa["disabled"]:
            raise not_found("service_account", sa_id)
        row, token = service.issue_token(conn, settings, "service_account", sa_id, body.name,
                                         body.expires_in_days)
        audit.record(conn, caller, "iam.token.create", "token", row["id"],
                     after={"principal_kind": "service_account", "principal_id": sa_id, "name": body.name},
                     context={"tenant_id": project["tenant_id"], "project_id": project_id})
    return {**row, "token": token}


@api.get("/v1/projects/{project_id}/service-accounts/{sa_id}/tokens", operation_id="service_accounts_tokens_list",
         response_model=Page[TokenInfo])
def list_service_account_tokens(project_id: UUID, sa_id: UUID, caller: Caller, db: DB,
                                cursor: CursorParam = None, limit: LimitParam = 50):
    """The service account's tokens (never their secrets), newest first."""
    with db.transaction() as conn:
        project = service.get_project(conn, project_id)
        caller.require("iam.service_account.read", tenant_id=project["tenant_id"], project_id=project_id)
        service.get_service_account(conn, sa_id, project_id)
        return keyset_page(conn, "api_tokens", cursor, limit, principal_kind="service_account", principal_id=sa_id)


# --- role bindings ------------------------------------------------------------------------------

@api.post("/v1/role-bindings", operation_id="role_bindings_create",
          openapi_extra=docs.example({'principal_kind': 'user',
                                      'principal_id': '9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d',
                                      'role': 'project_member',
                                      'tenant_id': '2c9e8f1a-5b4d-4c3e-8a7f-6e5d4c3b2a10',
                                      'project_id': '7b1f4c2e-0d3a-4e5b-9c6d-1a2b3c4d5e6f'}),
          responses=errors.responses("invalid_principal", "invalid_scope", "unknown_role"),
                                     response_model=RoleBinding, status_code=201)
def create_role_binding(body: RoleBindingCreate, caller: Caller, db: DB, settings: RunSettings):
    """Bind a role to a user or service account at tenant or project scope; the caller must hold what it grants.
    The runtime access of the scope's running instances follows (an access_sync is queued on those that have
    runtime identities)."""
    with db.transaction() as conn:
        row = service.create_binding(conn, caller, body.principal_kind, body.principal_id, body.role,
                                     body.tenant_id, body.project_id)
        access.binding_changed(conn, settings, caller, row, "granted")
        return row


@api.get("/v1/role-bindings", operation_id="role_bindings_list", response_model=Page[RoleBinding])
def list_role_bindings(caller: Caller, db: DB, tenant_id: UUID | None = None, project_id: UUID | None = None,
                       cursor: CursorParam = None, limit: LimitParam = 50):
    """Bindings at one scope: a project (project_id), a tenant and its projects (tenant_id), or all
    (neither; platform scope)."""
    with db.transaction() as conn:
        if project_id is not None:
            project = service.get_project(conn, project_id)
            caller.require("iam.role_binding.read", tenant_id=project["tenant_id"], project_id=project_id)
        elif tenant_id is not None:
            service.get_tenant(conn, tenant_id)
            caller.require("iam.role_binding.read", tenant_id=tenant_id)
        else:
            caller.require("iam.role_binding.read")
        rows = conn.execute(
            """SELECT * FROM role_bindings
                WHERE (%(t)s::uuid IS NULL OR tenant_id = %(t)s) AND (%(p)s::uuid IS NULL OR project_id = %(p)s)
                  AND seq > %(after)s ORDER BY seq LIMIT %(limit)s""",
            {"t": tenant_id, "p": project_id, "after": decode_cursor(cursor) or 0, "limit": limit + 1},
        ).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.delete("/v1/role-bindings/{binding_id}", operation_id="role_bindings_delete",
            responses=errors.responses("last_platform_admin"), status_code=204)
def delete_role_binding(binding_id: UUID, caller: Caller, db: DB, settings: RunSettings):
    """Remove a role binding; the permissions it granted end at once in the API, and in the runtime of the
    scope's running instances with the access_sync this queues (logins end, associations go)."""
    with db.transaction() as conn:
        row = service.delete_binding(conn, caller, binding_id)
        access.binding_changed(conn, settings, caller, row, "revoked")

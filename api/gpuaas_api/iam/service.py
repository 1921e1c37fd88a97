"""IAM rules and queries, usable from routes and from the CLI (bootstrap)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg

from ..audit import service as audit
from ..config import Settings
from ..errors import ApiError, conflict, forbidden, not_found, unprocessable
from .auth import Principal, new_token
from .permissions import ROLES


def get_tenant(conn: psycopg.Connection, tenant_id: UUID) -> dict:
    row = conn.execute("SELECT * FROM tenants WHERE id = %s", (tenant_id,)).fetchone()
    if row is None:
        raise not_found("tenant", tenant_id)
    return row


def check_tenant_name(conn: psycopg.Connection, name: str) -> None:
    """Tenant names are prefix-free with respect to "-" (docs/control-service.md "Publishers"): a private app's slug
    starts with its tenant's name and a dash, and with no name a dash-prefix of another, a slug has at most one
    owning tenant. Call it in the transaction that inserts the tenant: the table lock (SHARE ROW EXCLUSIVE conflicts
    with itself and with every write to tenants, not with reads or foreign-key checks) makes concurrent creations
    check one after the other, each seeing the names committed before it (read committed: a snapshot per
    statement)."""
    conn.execute("LOCK TABLE tenants IN SHARE ROW EXCLUSIVE MODE")
    taken = conn.execute("""SELECT name FROM tenants
                            WHERE starts_with(%(n)s, name || '-') OR starts_with(name, %(n)s || '-')
                            ORDER BY name LIMIT 1""", {"n": name}).fetchone()
    if taken is not None:
        longer = max(name, taken["name"], key=len)
        raise conflict("tenant_name_namespace", f"tenant names are prefix-free with respect to '-': {name} and the "
                       f"tenant {taken['name']} would both own the private app slugs {longer}-*",
                       name=name, conflicts_with=taken["name"])


def get_project(conn: psycopg.Connection, project_id: UUID) -> dict:
    row = conn.execute("SELECT * FROM projects WHERE id = %s", (project_id,)).fetchone()
    if row is None:
        raise not_found("project", project_id)
    return row


def get_user(conn: psycopg.Connection, user_id: UUID) -> dict:
    row = conn.execute("SELECT * FROM users WHERE id = %s", (user_id,)).fetchone()
    if row is None:
        raise not_found("user", user_id)
    return row


def get_service_account(conn: psycopg.Connection, sa_id: UUID, project_id: UUID | None = None) -> dict:
    row = conn.execute("SELECT * FROM service_accounts WHERE id = %s", (sa_id,)).fetchone()
    if row is None or (project_id is not None and row["project_id"] != project_id):
        raise not_found("service_account", sa_id)
    return row


def create_user(conn: psycopg.Connection, tenant_id: UUID | None, email: str, display_name: str | None) -> dict:
    # Unique within the tenant only: a platform-wide check would tell a tenant about other tenants' users.
    if conn.execute("SELECT 1 FROM users WHERE tenant_id IS NOT DISTINCT FROM %s AND lower(email) = lower(%s)",
                    (tenant_id, email)).fetchone():
        raise conflict("already_exists", f"user {email} already exists")
    return conn.execute(
        "INSERT INTO users (tenant_id, email, display_name) VALUES (%s, %s, %s) RETURNING *",
        (tenant_id, email, display_name or email),
    ).fetchone()


def issue_token(conn: psycopg.Connection, settings: Settings, principal_kind: str, principal_id: UUID, name: str,
                days: int | None, *, not_after: datetime | None = None) -> tuple[dict, str]:
    """A token living `days` (default: the service default). Its expiry is capped by the setting for the
    principal's kind and by `not_after` (the minting token's own expiry when a token mints for itself):
    an explicit lifetime past the cap is refused, the default is clipped to it."""
    now = datetime.now(UTC)
    max_days = {"user": settings.token_max_days_user,
                "service_account": settings.token_max_days_service_account}[principal_kind]
    limit = now + timedelta(days=max_days)
    if not_after is not None:
        limit = min(limit, not_after)
    expires_at = now + timedelta(days=days or settings.default_token_ttl_days)
    if expires_at > limit:
        if days is not None:
            raise unprocessable("token_lifetime_exceeded", f"this token may live until {limit.isoformat()} at most",
                                max_expires_at=limit.isoformat(), max_days=max_days)
        expires_at = limit
    _refuse_past_live_cap(conn, principal_kind, principal_id, settings.token_max_live_per_principal)
    return _insert_token(conn, principal_kind, principal_id, name, expires_at)


def _refuse_past_live_cap(conn: psycopg.Connection, principal_kind: str, principal_id: UUID, cap: int) -> None:
    """A principal holds at most `cap` live tokens, whoever mints them. The transaction-scoped advisory
    lock (as in quotas.enforce) makes a second mint wait for the first one's commit, so two mints
    cannot both take the last slot."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"tokens:{principal_kind}:{principal_id}",))
    live = conn.execute("""SELECT count(*) AS n FROM api_tokens WHERE principal_kind = %s AND principal_id = %s
                             AND revoked_at IS NULL AND expires_at > now()""",
                        (principal_kind, principal_id)).fetchone()["n"]
    if live >= cap:
        raise ApiError(429, "quota_exceeded",
                       f"a {principal_kind.replace('_', ' ')} may hold at most {cap} live tokens and this one holds "
                       f"{live}; revoke one it no longer needs (DELETE /v1/me/tokens/{{id}} or /v1/tokens/{{id}}) "
                       "to mint another", {"quota": "live_tokens", "limit": cap, "current": live})


def _insert_token(conn: psycopg.Connection, principal_kind: str, principal_id: UUID, name: str,
                  expires_at: datetime) -> tuple[dict, str]:
    token, digest = new_token()
    row = conn.execute(
        """INSERT INTO api_tokens (token_hash, principal_kind, principal_id, name, expires_at)
           VALUES (%s, %s, %s, %s, %s) RETURNING *""",
        (digest, principal_kind, principal_id, name, expires_at),
    ).fetchone()
    return row, token


def revoke_all_tokens(conn: psycopg.Connection, principal_kind: str, principal_id: UUID) -> int:
    return conn.execute("""UPDATE api_tokens SET revoked_at = now() WHERE principal_kind = %s
                           AND principal_id = %s AND revoked_at IS NULL""", (principal_kind, principal_id)).rowcount


def token_owner_scope(conn: psycopg.Connection, principal_kind: str, principal_id: UUID) -> tuple:
    """(tenant_id, project_id) at which tokens of this principal are administered."""
    if principal_kind == "user":
        user = get_user(conn, principal_id)
        return user["tenant_id"], None
    sa = get_service_account(conn, principal_id)
    return sa["tenant_id"], sa["project_id"]


_SCOPE_HINTS = {"platform": "give no tenant or project", "tenant": "give tenant_id only", "project": "give project_id"}


def binding_scope(conn: psycopg.Connection, role: str, tenant_id: UUID | None,
                  project_id: UUID | None) -> tuple[str, UUID | None, UUID | None]:
    """Resolve and check the scope a role is bound at: a project when project_id is given, else a tenant when
    tenant_id is, else the platform; one of the scope kinds the role is grantable at."""
    kinds = ROLES[role].scope_kinds
    scope_kind = "project" if project_id is not None else "tenant" if tenant_id is not None else "platform"
    if scope_kind not in kinds:
        raise unprocessable("invalid_scope", f"{role} is bound at {' or '.join(kinds)} scope: "
                            + "; or ".join(_SCOPE_HINTS[k] for k in kinds))
    if scope_kind == "platform":
        return scope_kind, None, None
    if scope_kind == "tenant":
        get_tenant(conn, tenant_id)
        return scope_kind, tenant_id, None
    project = get_project(conn, project_id)
    if tenant_id is not None and tenant_id != project["tenant_id"]:
        raise unprocessable("invalid_scope", "project does not belong to that tenant")
    return scope_kind, project["tenant_id"], project_id


def create_binding(conn: psycopg.Connection, actor: Principal, principal_kind: str, principal_id: UUID,
                   role: str, tenant_id: UUID | None, project_id: UUID | None) -> dict:
    if role not in ROLES:
        raise unprocessable("unknown_role", f"unknown role {role}")
    definition = ROLES[role]
    scope_kind, tenant_id, project_id = binding_scope(conn, role, tenant_id, project_id)
    actor.require("iam.role_binding.create", tenant_id=tenant_id, project_id=project_id)
    # No escalation: a caller grants only permissions it holds itself at that scope. Platform
    # IAM administrators (platform-scope iam.role_binding.create) are exempt so they can seat the
    # first tenant admins; what they grant is audited.
    platform_iam = any(b.scope_kind == "platform" and "iam.role_binding.create" in ROLES[b.role].permissions
                       for b in actor.bindings if b.role in ROLES)
    if not platform_iam:
        missing = sorted(k for k in definition.permissions
                         if not actor.permits(k, tenant_id=tenant_id, project_id=project_id))
        if missing:
            raise forbidden(f"cannot grant {role}: caller lacks some of its permissions", missing=missing)
    if principal_kind not in definition.principal_kinds:
        raise unprocessable("invalid_principal",
                            f"{role} can only be granted to a {' or a '.join(definition.principal_kinds)}")
    # A disabled (deleted) principal, or one the caller cannot see, is answered as missing.
    if principal_kind == "user":
        user = get_user(conn, principal_id)
        if user["disabled"] or not actor.sees(user["tenant_id"], None):
            raise not_found("user", principal_id)
        if scope_kind == "platform" and user["tenant_id"] is not None and not definition.platform_for_tenants:
            raise unprocessable("invalid_principal", f"{role} at platform scope is for users outside any tenant")
        if scope_kind != "platform" and user["tenant_id"] != tenant_id:
            raise unprocessable("invalid_principal", "the user belongs to another tenant")
    else:
        sa = get_service_account(conn, principal_id)
        if sa["disabled"] or not actor.sees(sa["tenant_id"], sa["project_id"]):
            raise not_found("service_account", principal_id)
        # A service account acts only inside its own project: bound there, or (catalog_publisher) at its own
        # tenant or the platform, where Principal.permits still confines it to its project.
        own = {"project": sa["project_id"] == project_id, "tenant": sa["tenant_id"] == tenant_id,
               "platform": definition.platform_for_tenants}[scope_kind]
        if not own:
            raise unprocessable("invalid_principal", "a service account acts only inside its own project and tenant")
    existing = conn.execute(
        """SELECT 1 FROM role_bindings WHERE principal_kind = %s AND principal_id = %s AND role = %s
             AND tenant_id IS NOT DISTINCT FROM %s AND project_id IS NOT DISTINCT FROM %s""",
        (principal_kind, principal_id, role, tenant_id, project_id),
    ).fetchone()
    if existing:
        raise conflict("already_exists", "this role binding already exists")
    row = conn.execute(
        """INSERT INTO role_bindings (principal_kind, principal_id, role, scope_kind, tenant_id, project_id,
               created_by) VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING *""",
        (principal_kind, principal_id, role, scope_kind, tenant_id, project_id, actor.id),
    ).fetchone()
    audit.record(conn, actor, "iam.role_binding.create", "role_binding", row["id"], after=row,
                 context={"tenant_id": tenant_id, "project_id": project_id})
    return row


def delete_binding(conn: psycopg.Connection, actor: Principal, binding_id: UUID) -> dict:
    row = conn.execute("SELECT * FROM role_bindings WHERE id = %s FOR UPDATE", (binding_id,)).fetchone()
    if row is None:
        raise not_found("role_binding", binding_id)
    actor.require("iam.role_binding.delete", tenant_id=row["tenant_id"], project_id=row["project_id"])
    if row["role"] == "platform_admin":
        others = conn.execute(
            "SELECT count(*) AS n FROM role_bindings WHERE role = 'platform_admin' AND id <> %s", (binding_id,)
        ).fetchone()["n"]
        if others == 0:
            raise conflict("last_platform_admin", "refusing to remove the last platform admin binding")
    conn.execute("DELETE FROM role_bindings WHERE id = %s", (binding_id,))
    audit.record(conn, actor, "iam.role_binding.delete", "role_binding", binding_id, before=row,
                 context={"tenant_id": row["tenant_id"], "project_id": row["project_id"]})
    return row


def revoke_token(conn: psycopg.Connection, actor: Principal, token_id: UUID, *, own: bool) -> dict:
    row = conn.execute("SELECT * FROM api_tokens WHERE id = %s FOR UPDATE", (token_id,)).fetchone()
    if row is None:
        raise not_found("token", token_id)
    if own:
        if (row["principal_kind"], row["principal_id"]) != (actor.kind, actor.id):
            raise not_found("token", token_id)
        tenant_id, project_id = actor.tenant_id, actor.project_id
    else:
        tenant_id, project_id = token_owner_scope(conn, row["principal_kind"], row["principal_id"])
        actor.require("iam.token.revoke", tenant_id=tenant_id, project_id=project_id)
    if row["revoked_at"] is None:
        row = conn.execute("UPDATE api_tokens SET revoked_at = now() WHERE id = %s RETURNING *",
                           (token_id,)).fetchone()
    audit.record(conn, actor, "iam.token.revoke", "token", token_id,
                 after={"principal_kind": row["principal_kind"], "principal_id": row["principal_id"]},
                 context={"tenant_id": tenant_id, "project_id": project_id})
    return row


def bootstrap_platform_admin(conn: psycopg.Connection, email: str, ttl_days: int) -> str:
    """Create the first platform admin and return its token. Refuses once any platform admin exists.
    The user is new, so its token is its first: the live-token cap of issue_token cannot bind here."""
    if conn.execute("SELECT 1 FROM role_bindings WHERE role = 'platform_admin'").fetchone():
        raise ApiError(409, "already_bootstrapped", "a platform admin already exists")
    user = create_user(conn, None, email, "platform admin")
    conn.execute(
        """INSERT INTO role_bindings (principal_kind, principal_id, role, scope_kind)
           VALUES ('user', %s, 'platform_admin', 'platform')""",
        (user["id"],),
    )
    token_row, token = _insert_token(conn, "user", user["id"], "bootstrap",
                                     datetime.now(UTC) + timedelta(days=ttl_days))
    actor = Principal(kind="user", id=user["id"], name=email)
    audit.record(conn, actor, "iam.bootstrap", "user", user["id"], after={"email": email, "role": "platform_admin",
                                                                           "token_id": token_row["id"]})
    return token

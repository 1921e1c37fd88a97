"""Who is calling and what may they do: bearer tokens, principals and permission checks."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated
from uuid import UUID

import psycopg
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..errors import forbidden, hidden, unauthenticated
from .permissions import ROLES

TOKEN_PREFIX = "gpa_"  # noqa: S105 - a public prefix that makes leaked tokens greppable
_bearer = HTTPBearer(auto_error=False, description="API token issued by this service (shown once)")


def new_token() -> tuple[str, str]:
    """A fresh random token and its sha256; only the hash is stored (tokens are high entropy)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Binding:
    id: UUID
    role: str
    scope_kind: str
    tenant_id: UUID | None
    project_id: UUID | None

    def covers(self, tenant_id: UUID | None, project_id: UUID | None) -> bool:
        if self.scope_kind == "platform":
            return True
        if self.scope_kind == "tenant":
            return tenant_id is not None and self.tenant_id == tenant_id
        return project_id is not None and self.project_id == project_id


@dataclass(frozen=True)
class Principal:
    kind: str  # user | service_account | system
    id: UUID | None
    name: str
    tenant_id: UUID | None = None
    project_id: UUID | None = None  # set for service accounts: the only project they act in
    token_id: UUID | None = None
    token_expires_at: datetime | None = None
    bindings: tuple[Binding, ...] = field(default_factory=tuple)

    def permits(self, key: str, *, tenant_id: UUID | None = None, project_id: UUID | None = None) -> bool:
        """Deny by default: allowed only if some binding's role grants `key` at a covering scope."""
        if self.kind == "service_account" and (project_id is None or project_id != self.project_id):
            return False
        return any(key in ROLES[b.role].permissions and b.covers(tenant_id, project_id)
                   for b in self.bindings if b.role in ROLES)

    def permits_anywhere(self, key: str) -> bool:
        return any(key in ROLES[b.role].permissions for b in self.bindings if b.role in ROLES)

    def sees(self, tenant_id: UUID | None, project_id: UUID | None) -> bool:
        """Whether the caller may learn that something owned by this tenant/project exists: it holds a
        binding there (a tenant binding sees the tenant's projects; a project binding its tenant, not its
        sibling projects; a platform binding everything, for a principal outside any tenant), or, for
        tenant-level things, it belongs to that tenant."""
        if tenant_id is None and project_id is None:
            return True
        if project_id is None and tenant_id == self.tenant_id:
            return True
        if self.kind == "service_account":
            return project_id is not None and project_id == self.project_id
        return any((b.scope_kind == "platform" and self.tenant_id is None)
                   or (b.scope_kind == "tenant" and b.tenant_id == tenant_id)
                   or (b.scope_kind == "project" and (b.project_id == project_id
                                                      or (project_id is None and b.tenant_id == tenant_id)))
                   for b in self.bindings)

    def require(self, key: str, *, tenant_id: UUID | None = None, project_id: UUID | None = None) -> None:
        """403 when the caller can see the scope but lacks `key`; outside the scope, the same 404 as for
        an id that does not exist, so neither the owner nor the existence leaks."""
        if self.permits(key, tenant_id=tenant_id, project_id=project_id):
            return
        if not self.sees(tenant_id, project_id):
            raise hidden(tenant_id, project_id)
        raise forbidden(f"permission {key} is not granted at this scope", permission=key)

    def require_anywhere(self, key: str) -> None:
        if not self.permits_anywhere(key):
            raise forbidden(f"permission {key} is not granted", permission=key)


# The actor for lifecycle changes made by background workers rather than by an API caller.
SYSTEM = Principal(kind="system", id=None, name="system")

_LOOKUP = """
SELECT t.id AS token_id, t.principal_kind, t.principal_id, t.expires_at, t.revoked_at, t.last_used_at,
       coalesce(u.tenant_id, s.tenant_id) AS tenant_id, s.project_id,
       coalesce(u.email, s.name) AS name, coalesce(u.disabled, s.disabled) AS disabled,
       (SELECT coalesce(json_agg(json_build_object(
                 'id', b.id, 'role', b.role, 'scope_kind', b.scope_kind,
                 'tenant_id', b.tenant_id, 'project_id', b.project_id)), '[]'::json)
          FROM role_bindings b
         WHERE b.principal_kind = t.principal_kind AND b.principal_id = t.principal_id) AS bindings
  FROM api_tokens t
  LEFT JOIN users u ON t.principal_kind = 'user' AND u.id = t.principal_id
  LEFT JOIN service_accounts s ON t.principal_kind = 'service_account' AND s.id = t.principal_id
 WHERE t.{column} = %s
"""


def _uuid(value):
    return UUID(value) if value else None


def principal_for_token(conn: psycopg.Connection, token: str) -> Principal | None:
    return _principal(conn, "token_hash", hash_token(token))


def principal_for_token_id(conn: psycopg.Connection, token_id: UUID) -> Principal | None:
    """The principal behind an already authenticated token, as it is now (long-lived requests re-check)."""
    return _principal(conn, "id", token_id)


def _principal(conn: psycopg.Connection, column: str, value) -> Principal | None:
    row = conn.execute(_LOOKUP.format(column=column), (value,)).fetchone()
    now = datetime.now(UTC)
    if row is None or row["revoked_at"] is not None or row["expires_at"] <= now or row["disabled"]:
        return None
    if row["disabled"] is None:  # principal row is gone
        return None
    if row["last_used_at"] is None or row["last_used_at"] < now - timedelta(minutes=5):
        conn.execute("UPDATE api_tokens SET last_used_at = now() WHERE id = %s", (row["token_id"],))
    bindings = tuple(
        Binding(UUID(b["id"]), b["role"], b["scope_kind"], _uuid(b["tenant_id"]), _uuid(b["project_id"]))
        for b in row["bindings"]
    )
    return Principal(kind=row["principal_kind"], id=row["principal_id"], name=row["name"],
                     tenant_id=row["tenant_id"], project_id=row["project_id"],
                     token_id=row["token_id"], token_expires_at=row["expires_at"], bindings=bindings)


def authenticate(request: Request,
                 credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    """FastAPI dependency: every /v1 route needs a valid token; anything else is 401."""
    if credentials is None or not credentials.credentials or len(credentials.credentials) > 200:
        raise unauthenticated()
    with request.app.state.db.transaction() as conn:
        principal = principal_for_token(conn, credentials.credentials)
    if principal is None:
        raise unauthenticated()
    return principal


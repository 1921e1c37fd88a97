"""Runtime secrets of purpose `artifact_pull`: a username and password issued for one run, good only
for pulling one repository of one registry, until the run ends (revoked) or its timeout passes
(expired). The password is handed to the run and never stored: the database keeps its SHA-256."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from uuid import UUID

import psycopg

from ..audit import service as audit


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode()).digest()


def issue(conn: psycopg.Connection, instance: dict, operation_id: UUID, registry: str, repository: str,
          ttl_seconds: int) -> dict[str, str]:
    """A credential for pulling `registry/repository` during one operation: {registry, username, password}."""
    username = f"gpuaas-run-{secrets.token_hex(8)}"
    password = secrets.token_urlsafe(32)
    row = conn.execute(
        """INSERT INTO runtime_secrets (instance_id, operation_id, purpose, registry, repository, username,
               secret_sha256, expires_at)
           VALUES (%s, %s, 'artifact_pull', %s, %s, %s, %s, now() + %s) RETURNING id, expires_at""",
        (instance["id"], operation_id, registry, repository, username, _digest(password),
         timedelta(seconds=ttl_seconds))).fetchone()
    audit.append_event(conn, instance, "runtime_secret.issued", {
        "runtime_secret_id": str(row["id"]), "purpose": "artifact_pull", "registry": registry,
        "repository": repository, "username": username, "operation_id": str(operation_id),
        "expires_at": row["expires_at"].isoformat()})
    return {"registry": registry, "username": username, "password": password}


def revoke(conn: psycopg.Connection, operation_id: UUID) -> int:
    """Ends every credential issued for the operation; returns how many were still live."""
    return conn.execute("""UPDATE runtime_secrets SET revoked_at = now()
                            WHERE operation_id = %s AND revoked_at IS NULL""", (operation_id,)).rowcount


def check(conn: psycopg.Connection, username: str, password: str) -> dict | None:
    """The live credential these match, or None (unknown, wrong password, revoked or expired)."""
    row = conn.execute("""SELECT * FROM runtime_secrets WHERE username = %s AND revoked_at IS NULL
                            AND expires_at > now()""", (username,)).fetchone()
    if row is None or not hmac.compare_digest(bytes(row["secret_sha256"]), _digest(password)):
        return None
    return row

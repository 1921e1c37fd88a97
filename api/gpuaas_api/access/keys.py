"""Users' SSH public keys: registered through the API, checked with `cryptography` (the key must parse as
the type it names), stored as one canonical line (type, base64, a plain comment), so nothing but a key
reaches an authorized_keys file: no options, no second line. Adding or removing one queues an access_sync
on the instances the user may log in to."""

from __future__ import annotations

import base64
import binascii
from uuid import UUID

import psycopg
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from ..audit import service as audit
from ..config import OperationSettings
from ..errors import conflict, forbidden, not_found, unprocessable
from ..iam.auth import Principal
from . import service

KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa",
             "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")
MAX_KEYS = 32


def canonical(public_key: str) -> str:
    """The key as one `type base64 [comment]` line, or 422 invalid_ssh_key saying what is wrong."""
    parts = public_key.strip().split(None, 2)
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        raise unprocessable("invalid_ssh_key", "an SSH public key is one line `<type> <base64> [comment]` with a "
                            f"type of {', '.join(KEY_TYPES)} (no options before it)")
    kind, blob = parts[0], parts[1]
    comment = parts[2] if len(parts) == 3 else ""
    if "\n" in public_key.strip() or "\r" in public_key or not all(0x20 <= ord(c) < 0x7f for c in comment) \
            or len(comment) > 100:
        raise unprocessable("invalid_ssh_key", "the key's comment must be one line of at most 100 printable "
                            "ASCII characters")
    try:
        decoded = base64.b64decode(blob, validate=True)
    except binascii.Error:
        raise unprocessable("invalid_ssh_key", "the key's second field is not base64") from None
    if not decoded.startswith(len(kind).to_bytes(4, "big") + kind.encode()):
        raise unprocessable("invalid_ssh_key", f"the key's data is not of type {kind}")
    if not kind.startswith("sk-"):  # cryptography does not load security-key types; their blob was checked above
        try:
            key = load_ssh_public_key(f"{kind} {blob}".encode())
        except (ValueError, TypeError) as exc:
            raise unprocessable("invalid_ssh_key", f"the key does not parse: {exc}") from None
        if isinstance(key, rsa.RSAPublicKey) and key.key_size < 2048:
            raise unprocessable("invalid_ssh_key", f"an RSA key needs at least 2048 bits (this one has "
                                f"{key.key_size})")
    return " ".join([kind, blob] + ([comment] if comment else []))


def _require_user(caller: Principal) -> None:
    if caller.kind != "user":
        raise forbidden("SSH keys belong to people: a service account has no login")


def list_keys(conn: psycopg.Connection, caller: Principal) -> list[dict]:
    _require_user(caller)
    return conn.execute("SELECT * FROM ssh_keys WHERE user_id = %s ORDER BY seq", (caller.id,)).fetchall()


def add(conn: psycopg.Connection, settings: OperationSettings, caller: Principal, name: str, public_key: str) -> dict:
    _require_user(caller)
    line = canonical(public_key)
    fingerprint = service.fingerprint(line)
    existing = conn.execute("SELECT name FROM ssh_keys WHERE user_id = %s AND (fingerprint = %s OR name = %s)",
                            (caller.id, fingerprint, name)).fetchone()
    if existing:
        raise conflict("already_exists", f"you already have a key named {existing['name']} or with fingerprint "
                       f"{fingerprint}", fingerprint=fingerprint)
    count = conn.execute("SELECT count(*) AS n FROM ssh_keys WHERE user_id = %s", (caller.id,)).fetchone()["n"]
    if count >= MAX_KEYS:
        raise conflict("conflict", f"at most {MAX_KEYS} SSH keys per user: remove one first")
    row = conn.execute("""INSERT INTO ssh_keys (user_id, name, public_key, fingerprint) VALUES (%s, %s, %s, %s)
                          RETURNING *""", (caller.id, name, line, fingerprint)).fetchone()
    _audit_and_sync(conn, settings, caller, "iam.ssh_key.create", row, after=row)
    return row


def delete(conn: psycopg.Connection, settings: OperationSettings, caller: Principal, key_id: UUID) -> None:
    _require_user(caller)
    row = conn.execute("DELETE FROM ssh_keys WHERE id = %s AND user_id = %s RETURNING *",
                       (key_id, caller.id)).fetchone()
    if row is None:
        raise not_found("ssh_key", key_id)
    _audit_and_sync(conn, settings, caller, "iam.ssh_key.delete", row, before=row)


def _audit_and_sync(conn, settings, caller: Principal, action: str, row: dict, **change) -> None:
    audit.record(conn, caller, action, "ssh_key", row["id"], **change, context={"tenant_id": caller.tenant_id})
    service.queue_sync(conn, settings, caller, tenant_id=caller.tenant_id, reason=f"{action} {row['fingerprint']}",
                       login_only=True)

"""Bearer tokens for a Docker distribution registry configured with `auth: token` (its `realm` is
this service's GET /v1/registry/token): ES256 JWTs carrying the granted access, signed with a key
whose self-signed certificate the registry trusts (`rootcertbundle`). The token names the certificate
in its `x5c` header, which the registry checks against that bundle.

The key and its certificate are made once and kept in the database (table service_keys), sealed with the
service's secret key: every serve replica, on any machine, signs with the same key, so a registry that trusts
its certificate accepts a token from any of them. A key a service made before the database kept it (the state
directory's `registry-token.pem`) becomes that key, so the registries that trust it go on working.
"""

from __future__ import annotations

import base64
import datetime as dt
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import jwt
from cryptography import x509
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

if TYPE_CHECKING:
    from ..db import Database

TOKEN_SECONDS = 300


@dataclass(frozen=True)
class SigningKey:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    def certificate_pem(self) -> str:
        return self.certificate.public_bytes(serialization.Encoding.PEM).decode()


KEY_NAME = "registry_token_signer"


class KeySealedElsewhere(Exception):
    """The database's key was sealed with another secret key than this process's."""


def signing_key(db: Database, cipher: Fernet, state_dir: Path) -> SigningKey:
    """The key every replica signs with: the database's, made (or taken from `state_dir`'s earlier
    `registry-token.pem`) by the first process that needs one; concurrent first uses agree on one."""
    with db.transaction() as conn:
        row = conn.execute("SELECT sealed FROM service_keys WHERE name = %s", (KEY_NAME,)).fetchone()
        if row is None:
            earlier = state_dir / "registry-token.pem"
            pem = earlier.read_bytes() if earlier.is_file() else _new_pem()
            conn.execute("INSERT INTO service_keys (name, sealed) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                         (KEY_NAME, cipher.encrypt(pem)))
            row = conn.execute("SELECT sealed FROM service_keys WHERE name = %s", (KEY_NAME,)).fetchone()
    try:
        pem = cipher.decrypt(bytes(row["sealed"]))
    except InvalidToken:
        raise KeySealedElsewhere("the registry token key in the database was sealed with another secret key: "
                                 "every serve replica and worker needs the same GPUAAS_SECRET_KEY") from None
    return SigningKey(serialization.load_pem_private_key(pem, password=None), x509.load_pem_x509_certificate(pem))


def _new_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuaas registry token issuer")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()) + cert.public_bytes(serialization.Encoding.PEM)


def token(signer: SigningKey, *, issuer: str, service: str, subject: str,
          access: list[dict]) -> tuple[str, int]:
    """A signed token granting `access` ([{type, name, actions}]), and its lifetime in seconds."""
    now = int(dt.datetime.now(dt.UTC).timestamp())
    claims = {"iss": issuer, "sub": subject, "aud": service, "iat": now, "nbf": now - 5,
              "exp": now + TOKEN_SECONDS, "jti": secrets.token_hex(16), "access": access}
    x5c = base64.b64encode(signer.certificate.public_bytes(serialization.Encoding.DER)).decode()
    return jwt.encode(claims, signer.key, algorithm="ES256", headers={"typ": "JWT", "x5c": [x5c]}), TOKEN_SECONDS

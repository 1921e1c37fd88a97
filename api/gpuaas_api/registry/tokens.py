"""Bearer tokens for a Docker distribution registry configured with `auth: token` (its `realm` is
this service's GET /v1/registry/token): ES256 JWTs carrying the granted access, signed with a key
whose self-signed certificate the registry trusts (`rootcertbundle`). The token names the certificate
in its `x5c` header, which the registry checks against that bundle.

The key and its certificate are made once, in one file of the state directory
(`registry-token.pem`, mode 0600, written whole and linked into place so concurrent processes agree);
every serve process sharing that directory signs with them.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

TOKEN_SECONDS = 300


@dataclass(frozen=True)
class SigningKey:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    def certificate_pem(self) -> str:
        return self.certificate.public_bytes(serialization.Encoding.PEM).decode()


def signing_key(state_dir: Path) -> SigningKey:
    path = state_dir / "registry-token.pem"
    if not path.exists():
        _create(path)
    pem = path.read_bytes()
    return SigningKey(serialization.load_pem_private_key(pem, password=None), x509.load_pem_x509_certificate(pem))


def _create(path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuaas registry token issuer")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()) + cert.public_bytes(serialization.Encoding.PEM)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    try:
        os.link(partial, path)
    except FileExistsError:
        pass  # another process made its pair first: everyone uses that one
    finally:
        partial.unlink()


def token(signer: SigningKey, *, issuer: str, service: str, subject: str,
          access: list[dict]) -> tuple[str, int]:
    """A signed token granting `access` ([{type, name, actions}]), and its lifetime in seconds."""
    now = int(dt.datetime.now(dt.UTC).timestamp())
    claims = {"iss": issuer, "sub": subject, "aud": service, "iat": now, "nbf": now - 5,
              "exp": now + TOKEN_SECONDS, "jti": secrets.token_hex(16), "access": access}
    x5c = base64.b64encode(signer.certificate.public_bytes(serialization.Encoding.DER)).decode()
    return jwt.encode(claims, signer.key, algorithm="ES256", headers={"typ": "JWT", "x5c": [x5c]}), TOKEN_SECONDS

"""The registry token service (the Docker token authentication protocol) and its certificate.

A registry run with `auth: token` sends clients here for a bearer token: `GET /v1/registry/token?
service=...&scope=repository:<name>:pull` with HTTP Basic credentials. The only credentials it takes
are runtime secrets of purpose `artifact_pull` (credentials.py), and it grants only what they allow:
pull, of their repository, while they are live. Any other scope is left out of the token, so the
registry refuses it."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import logging
from typing import Annotated

from fastapi import Query, Request
from pydantic import BaseModel, Field

from ..config import OperationSettings
from ..deps import DB, AppSettings, Caller, router
from ..errors import ApiError
from ..secrets import service as secrets
from . import credentials, tokens

api = router("registry")
log = logging.getLogger(__name__)


class RegistryToken(BaseModel):
    token: str
    access_token: str
    expires_in: int
    issued_at: str


def _signer(request: Request) -> tokens.SigningKey:
    signer = getattr(request.app.state, "registry_signer", None)
    if signer is None:
        settings = getattr(request.app.state, "operation_settings", None) or OperationSettings()
        try:
            signer = tokens.signing_key(request.app.state.db, secrets.cipher(settings), settings.state_dir)
        except tokens.KeySealedElsewhere as exc:
            log.error("%s", exc)
            raise ApiError(503, "service_misconfigured", str(exc)) from None
        request.app.state.registry_signer = signer
    return signer


def _basic(request: Request) -> tuple[str, str]:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    try:
        username, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        sep = ""
    if scheme.lower() != "basic" or not sep:
        raise ApiError(401, "unauthenticated", "send the run's pull credential with HTTP Basic authentication")
    return username, password


def granted(credential: dict, scopes: list[str]) -> list[dict]:
    """The part of the requested scopes the credential allows: pull of its own repository."""
    access = []
    for scope in scopes:
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        if kind == "repository" and name == credential["repository"] and "pull" in actions.split(","):
            access.append({"type": "repository", "name": name, "actions": ["pull"]})
    return access


@api.get("/v1/registry/token", response_model=RegistryToken, include_in_schema=False)
def registry_token(request: Request, db: DB, settings: AppSettings, service: str,
                   scope: Annotated[list[str], Query()] = ()):  # noqa: B008 - FastAPI's query list
    """For registries, not API clients (Docker token authentication); see the module docstring."""
    username, password = _basic(request)
    if service != settings.registry_token_service:
        raise ApiError(401, "unauthenticated", f"this token service serves {settings.registry_token_service!r}")
    with db.transaction() as conn:
        credential = credentials.check(conn, username, password)
    if credential is None:
        raise ApiError(401, "unauthenticated", "unknown, revoked or expired pull credential")
    access = granted(credential, list(scope))
    signed, lifetime = tokens.token(_signer(request), issuer=settings.registry_token_issuer, service=service,
                                    subject=username, access=access)
    log.info("registry token for %s: %s", username, access or "no access")
    issued = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
    return RegistryToken(token=signed, access_token=signed, expires_in=lifetime, issued_at=issued)


class TokenServiceConfig(BaseModel):
    """What a registry needs for `auth: token` with this service (its `realm` is this service's
    /v1/registry/token URL, as the hosts reach it)."""
    service: str
    issuer: str
    rootcertbundle: str = Field(description="PEM certificate of the key tokens are signed with")


@api.get("/v1/registry/certificate", operation_id="registry_certificate_get", response_model=TokenServiceConfig)
def registry_certificate(request: Request, caller: Caller, settings: AppSettings):
    """The service, issuer and certificate a registry using this token service is configured with."""
    caller.require("apps.catalog.write")
    return TokenServiceConfig(service=settings.registry_token_service, issuer=settings.registry_token_issuer,
                              rootcertbundle=_signer(request).certificate_pem())

"""The one error envelope: {"error": {code, message, details, correlation_id}} for every failure,
including validation errors, unknown routes and wrong methods."""

from __future__ import annotations

import logging
from typing import Any, Literal, get_args
from uuid import UUID

import psycopg.errors
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import correlation

log = logging.getLogger(__name__)


# Every code the service answers with, and its HTTP status. tests/openapi checks that every code the
# source raises is here, so a client generator gets the complete enumeration.
ERROR_CODES: dict[str, int] = {
    # any route
    "bad_request": 400, "invalid_cursor": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "validation_error": 422,
    "quota_exceeded": 429,
    "database_unavailable": 503, "not_ready": 503,
    # replicas that disagree on a shared setting (every replica and worker needs the same GPUAAS_SECRET_KEY)
    "service_misconfigured": 503,
    "http_error": 500,
    # database constraints that slip past validation
    "already_exists": 409, "invalid_reference": 422, "constraint_violation": 422, "invalid_value": 422,
    # IAM
    "already_bootstrapped": 409, "last_platform_admin": 409, "invalid_principal": 422, "invalid_scope": 422,
    "unknown_role": 422, "token_lifetime_exceeded": 422,
    # tenant names are prefix-free with respect to "-": each private app slug has one owning tenant
    "tenant_name_namespace": 409,
    # catalog and content
    "artifact_in_use": 409, "no_active_version": 409, "artifact_content_missing": 422,
    "artifact_digest_mismatch": 422, "artifact_mismatch": 422, "artifact_retired": 422, "invalid_digest": 422,
    "reference_not_pinned": 422, "illegal_transition": 422, "unknown_state": 422, "workload_artifact_kind": 422,
    "workload_artifact_required": 422, "workload_not_declared": 422, "invalid_parameters": 422,
    "artifact_not_canary": 409,
    # publishers: a tenant's private app is named <tenant name>-<name>
    "app_slug_namespace": 422,
    # promotion gates: a move by hand that a gate makes (gate_required); a canary version with too few successful
    # canary instances to become active
    "gate_required": 409, "canary_instances_short": 409,
    # a staging gate asked of what it does not apply to; a retirement inside the grace period after deprecation
    "gate_not_applicable": 409, "retire_grace_period": 409,
    # file artifacts: a source outside the operator's allowlist; a version's files against its adapter's `files:`
    "file_source_not_allowed": 422, "file_artifact_required": 422, "file_not_declared": 422,
    "file_artifact_kind": 422, "files_not_external": 422,
    # tenant-private registries: an allowlisted host, not the platform's own; a run's registry still usable
    "registry_not_allowlisted": 422, "registry_host_reserved": 422,
    "tenant_registry_unavailable": 422,
    # policy and allocations
    "overlay_widens_policy": 409, "missing_scope": 422, "allocation_in_use": 409, "host_registered_elsewhere": 409,
    # instances
    "not_entitled": 403, "policy_denied": 403, "version_not_usable": 409, "artifact_not_active": 409,
    "compatibility_refused": 422, "host_in_use": 409, "host_taken": 409, "no_free_host": 409, "role_at_max": 409,
    "instance_not_operable": 409, "instance_not_deletable": 409, "operation_open": 409, "member_still_live": 409,
    "allocation.unknown": 422, "placement.host": 422, "duplicate_node_name": 422,
    # operations
    "instance_already_deployed": 409, "instance_decommissioning": 409, "action_not_supported": 409,
    "member_already_removed": 409, "member_busy": 409, "member_state_conflict": 409, "already_at_version": 409,
    "no_previous_version": 409, "idempotency_key_reused": 409, "operation_finished": 409,
    "operation_in_progress": 409, "no_playbook": 422, "no_status_module": 422, "role_minimum": 409,
    "no_cleanup_playbook": 409, "smoke_instance": 409, "site_vars_conflict": 422,
    # runtime access credentials
    "credential_unavailable": 502,
    # jobs, nodes and logins (docs/scheduler.md)
    "no_scheduler": 409, "scheduler_unavailable": 502, "scheduler_refused": 403, "identity_not_synced": 409,
    "account_not_allowed": 403, "node_operation_not_supported": 409, "invalid_ssh_key": 422, "no_login": 409,
    # operating modes and tenant-shared runtimes (docs/tenant-shared.md)
    "mode_not_available": 422, "scope_not_supported": 422, "shared_runtime_exists": 409,
    "project_not_in_tenant": 422, "project_not_allowlisted": 403, "already_attached": 409, "not_shared": 409,
    "owner_attachment": 409, "attachment_has_jobs": 409, "already_detached": 409, "project_not_attached": 422,
    "principal_not_served": 422, "already_allowed": 409, "cross_project_denied": 403, "account_required": 422,
    "grant_has_jobs": 409, "already_revoked": 409,
}

ErrorCode = Literal[
    "bad_request", "invalid_cursor", "unauthenticated", "forbidden", "not_found", "method_not_allowed", "conflict",
    "payload_too_large", "unsupported_media_type", "validation_error", "quota_exceeded", "database_unavailable",
    "not_ready", "service_misconfigured", "http_error", "already_exists", "invalid_reference",
    "constraint_violation", "invalid_value",
    "constraint_violation", "invalid_value",
    "already_bootstrapped", "last_platform_admin", "invalid_principal", "invalid_scope", "unknown_role",
    "token_lifetime_exceeded", "tenant_name_namespace", "artifact_in_use", "no_active_version",
    "artifact_content_missing",
    "artifact_digest_mismatch", "artifact_mismatch", "artifact_retired", "invalid_digest", "reference_not_pinned",
    "illegal_transition", "unknown_state", "workload_artifact_kind", "workload_artifact_required",
    "workload_not_declared", "invalid_parameters", "artifact_not_canary", "app_slug_namespace",
    "gate_required", "canary_instances_short", "gate_not_applicable", "retire_grace_period",
    "file_source_not_allowed", "file_artifact_required", "file_not_declared", "file_artifact_kind",
    "files_not_external",
    "registry_not_allowlisted", "registry_host_reserved", "tenant_registry_unavailable",
    "overlay_widens_policy", "missing_scope",
    "allocation_in_use", "host_registered_elsewhere", "not_entitled", "policy_denied", "version_not_usable",
    "artifact_not_active", "compatibility_refused", "host_in_use", "host_taken", "no_free_host", "role_at_max",
    "instance_not_operable", "instance_not_deletable", "operation_open", "member_still_live", "allocation.unknown",
    "placement.host", "duplicate_node_name", "instance_already_deployed", "instance_decommissioning",
    "action_not_supported", "member_already_removed", "member_busy", "member_state_conflict", "already_at_version",
    "no_previous_version", "idempotency_key_reused", "operation_finished", "operation_in_progress", "no_playbook",
    "no_status_module", "role_minimum", "no_cleanup_playbook", "smoke_instance", "site_vars_conflict",
    "credential_unavailable",
    "no_scheduler", "scheduler_unavailable", "scheduler_refused", "identity_not_synced", "account_not_allowed",
    "node_operation_not_supported", "invalid_ssh_key", "no_login", "mode_not_available", "scope_not_supported",
    "shared_runtime_exists", "project_not_in_tenant", "project_not_allowlisted", "already_attached", "not_shared",
    "owner_attachment", "attachment_has_jobs", "already_detached", "project_not_attached", "principal_not_served",
    "already_allowed", "cross_project_denied", "account_required", "grant_has_jobs", "already_revoked",
]
assert set(get_args(ErrorCode)) == set(ERROR_CODES), "ErrorCode and ERROR_CODES list the same codes"


class ErrorBody(BaseModel):
    code: ErrorCode = Field(description="stable machine-readable error code (one of a fixed set)")
    message: str
    details: dict[str, Any] = Field(default_factory=dict)
    correlation_id: str


class ErrorEnvelope(BaseModel):
    error: ErrorBody


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


def not_found(kind: str, ident: Any) -> ApiError:
    return ApiError(404, "not_found", f"{kind} {ident} not found", {"kind": kind, "id": str(ident)})


class Hidden(ApiError):
    """The caller is outside the tenant/project that owns what it asked for. The handler answers with
    the not_found of the id the request named, so the answer equals the one for a missing id."""

    def __init__(self, fallback: tuple[str, Any]):
        super().__init__(404, "not_found", "not found")
        self.fallback = fallback


def hidden(tenant_id: Any, project_id: Any) -> Hidden:
    # Without an id in the path, the request named the scope itself (a query or body project_id/tenant_id).
    return Hidden(("project", project_id) if project_id else ("tenant", tenant_id))


# Path parameter -> the kind its not_found names (see the services' get_* functions).
_PATH_KINDS = {"tenant_id": "tenant", "project_id": "project", "user_id": "user", "sa_id": "service_account",
               "token_id": "token", "binding_id": "role_binding", "instance_id": "app_instance",
               "member_id": "member", "operation_id": "operation", "allocation_id": "allocation",
               "overlay_id": "policy_overlay", "artifact_id": "artifact"}


def _named_resource(request: Request, fallback: tuple[str, Any]) -> tuple[str, Any]:
    """The first resource id in the request path: the one whose lookup decides access."""
    for name, value in request.path_params.items():
        if name in _PATH_KINDS:
            try:
                return _PATH_KINDS[name], UUID(str(value))
            except ValueError:
                return _PATH_KINDS[name], value
    return fallback


def conflict(code: str, message: str, **details: Any) -> ApiError:
    return ApiError(409, code, message, details)


def unprocessable(code: str, message: str, **details: Any) -> ApiError:
    return ApiError(422, code, message, details)


def forbidden(message: str, **details: Any) -> ApiError:
    return ApiError(403, "forbidden", message, details)


def unauthenticated(message: str = "missing, invalid, revoked or expired bearer token") -> ApiError:
    return ApiError(401, "unauthenticated", message)


def envelope(status: int, code: str, message: str, details: dict[str, Any] | None = None,
             headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": details or {},
                      "correlation_id": correlation.current()}}
    return JSONResponse(body, status_code=status, headers=headers)


_HTTP_CODES = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
               415: "unsupported_media_type", 422: "validation_error"}

# Database constraint failures that slip past validation are client errors, never 500s.
_DB_ERRORS = [
    (psycopg.errors.UniqueViolation, 409, "already_exists", "a resource with these keys already exists"),
    (psycopg.errors.ForeignKeyViolation, 422, "invalid_reference", "a referenced resource does not exist"),
    (psycopg.errors.CheckViolation, 422, "constraint_violation", "a value is outside its allowed set"),
    (psycopg.errors.DataError, 422, "invalid_value", "a value cannot be stored"),
]


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        if isinstance(exc, Hidden):
            exc = not_found(*_named_resource(request, exc.fallback))
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return envelope(exc.status, exc.code, exc.message, exc.details, headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException):
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return envelope(exc.status_code, code, message, {}, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError):
        # loc/msg/type only: echoing input back could leak secrets from a request body.
        problems = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
                     "type": str(e.get("type", ""))} for e in exc.errors()]
        return envelope(422, "validation_error", "request validation failed", {"errors": problems})

    @app.exception_handler(psycopg.OperationalError)
    async def _database_unavailable(_: Request, exc: psycopg.OperationalError):
        # The server is down, restarting or out of connections (psycopg_pool.PoolTimeout included):
        # the request may succeed if retried, and the cause (host names, paths) stays in the logs.
        log.warning("database unavailable: %s", type(exc).__name__)
        return envelope(503, "database_unavailable", "the database is unavailable; retry shortly", {},
                        {"Retry-After": "5"})

    for exc_type, status, code, message in _DB_ERRORS:
        def handler(_: Request, exc: Exception, status=status, code=code, message=message):
            diag = getattr(exc, "diag", None)
            details = {"constraint": diag.constraint_name} if diag and diag.constraint_name else {}
            return envelope(status, code, message, details)

        app.add_exception_handler(exc_type, handler)


_STATUS_TEXT = {400: "Bad request", 401: "Unauthenticated", 403: "Forbidden (permission or policy)",
                404: "Not found", 409: "Conflict with the current state", 413: "Request body too large",
                422: "Validation or compatibility error", 429: "Quota exceeded",
                502: "No host of the instance answered", 503: "Database unavailable"}

# What every route can answer, whatever it does.
COMMON_CODES = ("bad_request", "invalid_cursor", "unauthenticated", "forbidden", "not_found", "payload_too_large",
                "already_exists", "validation_error", "database_unavailable")


def responses(*codes: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses for the error codes a route answers, next to COMMON_CODES: one entry per status
    with the envelope schema, the codes in its description, and one example per code."""
    by_status: dict[int, list[str]] = {}
    for code in (*COMMON_CODES, *codes):
        status = ERROR_CODES[code]  # KeyError: a code missing from the enumeration
        if code not in by_status.setdefault(status, []):
            by_status[status].append(code)
    return {status: {"model": ErrorEnvelope,
                     "description": f"{_STATUS_TEXT.get(status, 'Error')}: " + ", ".join(f"`{c}`" for c in found),
                     "content": {"application/json": {"examples": {c: {"value": {"error": {
                         "code": c, "message": c.replace("_", " "), "details": {},
                         "correlation_id": "3f0c9d2e-6b1a-4c7e-8d5f-0a1b2c3d4e5f"}}} for c in found}}}}
            for status, found in sorted(by_status.items())}


ERROR_RESPONSES = responses()

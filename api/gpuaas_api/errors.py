"""The one error envelope: {"error": {code, message, details, correlation_id}} for every failure,
including validation errors, unknown routes and wrong methods."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

import psycopg.errors
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import correlation

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    code: str = Field(description="stable machine-readable error code")
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


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorEnvelope, "description": description}
    for status, description in [
        (400, "Bad request"),
        (401, "Unauthenticated"),
        (403, "Forbidden (permission or policy)"),
        (404, "Not found"),
        (409, "Conflict with the current state"),
        (422, "Validation or compatibility error"),
    ]
}

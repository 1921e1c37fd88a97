"""The one error envelope: {"error": {code, message, details, correlation_id}} for every failure,
including validation errors, unknown routes and wrong methods."""

from __future__ import annotations

from typing import Any

import psycopg.errors
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import correlation


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
    async def _api_error(_: Request, exc: ApiError):
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

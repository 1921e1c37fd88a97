"""The client's errors, apart from the HTTP client so that importing them costs no HTTP stack (every
`gpuaas` command, serve and worker included, imports the client commands' modules)."""

from __future__ import annotations

import json


class ClientError(Exception):
    """A problem on this side (not logged in, no such name, the service unreachable); str() is one line."""


def unreachable(url: str, exc: Exception) -> ClientError:
    """The service did not answer at `url` (a transport error): the address is named, it is what to check."""
    return ClientError(f"cannot reach {url} ({type(exc).__name__}: {exc})")


class ApiError(ClientError):
    """The service's error envelope: {"error": {code, message, details, correlation_id}}."""

    def __init__(self, status: int, code: str, message: str, details: dict | None = None,
                 correlation_id: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details, self.correlation_id = details or {}, correlation_id

    def envelope(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "details": self.details,
                          "correlation_id": self.correlation_id}}

    def __str__(self) -> str:
        details = f" {json.dumps(self.details, separators=(',', ':'), default=str)}" if self.details else ""
        return (f"{self.code}: {self.message}{details} "
                f"(HTTP {self.status}, correlation_id {self.correlation_id or '-'})")


class StreamEnded(ClientError):
    """The service ended the event stream for good (`event: end`, e.g. the token was revoked)."""

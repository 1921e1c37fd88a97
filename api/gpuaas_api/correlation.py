"""Correlation ids: taken from X-Correlation-ID (when well formed) or generated, echoed on every
response, and readable anywhere in the request through a context variable."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import uuid
from collections.abc import Iterator

HEADER = "X-Correlation-ID"
_HEADER_BYTES = HEADER.lower().encode()
# The runner uses the id as ansible-runner's ident, a path component: no dots, slashes or colons.
_VALID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$")

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("correlation_id", default=None)
log = logging.getLogger(__name__)


def new_id() -> str:
    return str(uuid.uuid4())


def current() -> str:
    """The request's correlation id, or a fresh one outside a request (e.g. in a worker)."""
    value = _current.get()
    if value is None:
        value = new_id()
        _current.set(value)
    return value


def use(value: str | None) -> contextvars.Token:
    """Bind a correlation id for the current context (workers call this per operation)."""
    return _current.set(value if value and _VALID.match(value) else new_id())


@contextlib.contextmanager
def correlated(value: str | None) -> Iterator[str]:
    """`value` (see use()) bound for the block, the previous id restored after it: a worker's unit of work."""
    token = use(value)
    try:
        yield _current.get()
    finally:
        _current.reset(token)


class CorrelationMiddleware:
    """Pure ASGI middleware (no BaseHTTPMiddleware overhead). It also turns any unhandled exception
    into the error envelope so even a 500 carries the correlation id."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = None
        for name, value in scope.get("headers", ()):
            if name == _HEADER_BYTES:
                incoming = value.decode("latin-1")
                break
        token = use(incoming)
        cid = _current.get()
        started = False

        async def send_with_header(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != _HEADER_BYTES]
                headers.append((_HEADER_BYTES, cid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_header)
        except Exception:
            log.exception("unhandled error (correlation_id=%s)", cid)
            if started:
                raise
            body = json.dumps(
                {"error": {"code": "internal_error", "message": "internal server error",
                           "details": {}, "correlation_id": cid}}
            ).encode()
            await send_with_header({"type": "http.response.start", "status": 500,
                                    "headers": [(b"content-type", b"application/json"),
                                                (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        finally:
            _current.reset(token)

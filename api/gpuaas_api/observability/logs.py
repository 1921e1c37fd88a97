"""Logs as JSON lines (python-json-logger), one format for `serve`, `worker` and uvicorn's own loggers.

Every line carries `correlation_id` when one is bound (a request, a run), and where known the ids
of what it is about: `operation_id`, `tenant_id`, `project_id`, `instance_id`, `member_id`. They
come from two places, read when the line is written:
- `bind(...)`: what a worker knows about the operation it runs (and any code that knows more);
- the request being served: its path parameters, once routing has found them (the middleware binds
  the ASGI scope, which the router fills in before the handler runs).

`text` is the same content for a human at a terminal: `time level logger [correlation_id]: message`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from .. import correlation

# The ids a line may carry, in the order they are written.
ID_FIELDS = ("operation_id", "tenant_id", "project_id", "instance_id", "member_id")
_bound: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "gpuaas_log_fields", default=MappingProxyType({}))
_scope: contextvars.ContextVar[dict | None] = contextvars.ContextVar("gpuaas_log_request_scope", default=None)
_installed: logging.Handler | None = None


@contextlib.contextmanager
def bind(**fields: Any) -> Iterator[None]:
    """Every line logged in this context (this thread or task, and what it starts with the context
    copied) carries `fields`; None values are left out."""
    token = _bound.set(MappingProxyType({**_bound.get(), **{k: str(v) for k, v in fields.items() if v is not None}}))
    try:
        yield
    finally:
        _bound.reset(token)


def bind_request(scope: dict) -> contextvars.Token:
    """The ASGI scope of the request being served; its path parameters are read at each line."""
    return _scope.set(scope)


def unbind_request(token: contextvars.Token) -> None:
    _scope.reset(token)


def context_fields() -> dict[str, str]:
    # The private variable, not correlation.current(): a log line must not invent a correlation id.
    cid = correlation._current.get()
    fields = {"correlation_id": cid} if cid else {}
    scope = _scope.get()
    if scope is not None:
        params = scope.get("path_params") or {}
        fields |= {name: str(params[name]) for name in ID_FIELDS if name in params}
    return fields | dict(_bound.get())


class ContextFilter(logging.Filter):
    """Puts the correlation id and the bound ids on each record (as attributes the formatters read)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in context_fields().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


class JsonLines(JsonFormatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, correlation_id and
    ids, then whatever `extra=` the call passed, then exc_info when there is one."""

    FIRST = ("time", "level", "logger", "message", "correlation_id", *ID_FIELDS)
    # uvicorn's copy of its message with terminal colour codes: the message is already there.
    SKIPPED = ("color_message",)

    def __init__(self) -> None:
        super().__init__(["levelname", "name", "message"], rename_fields={"levelname": "level", "name": "logger"},
                         timestamp="time", json_ensure_ascii=False,
                         reserved_attrs=[*RESERVED_ATTRS, *self.SKIPPED])

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        # A fixed order for the fields every line has, whatever order the record's attributes came in.
        first = {name: log_data.pop(name) for name in self.FIRST if name in log_data}
        rest = dict(log_data)
        log_data.clear()
        log_data.update(first | rest)


class TextLines(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        cid = getattr(record, "correlation_id", None)
        ids = " ".join(f"{n}={getattr(record, n)}" for n in ID_FIELDS if getattr(record, n, None))
        record.context = "".join(f" [{part}]" for part in (cid, ids) if part)
        return super().format(record)


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonLines()
    if fmt == "text":
        return TextLines()
    raise ValueError(f"unknown log format {fmt!r} (json or text)")


def configure(level: str, fmt: str, stream=None) -> logging.Handler:
    """One handler on the root logger (stderr by default) with the format and the context filter;
    uvicorn's loggers propagate to it (serve runs uvicorn with log_config=None). Calling it again
    replaces the handler it installed before, and no other."""
    global _installed
    root = logging.getLogger()
    if _installed is not None:
        root.removeHandler(_installed)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    handler.addFilter(ContextFilter())
    root.addHandler(handler)
    root.setLevel(level)
    # uvicorn keeps its own handlers when it configures logging itself; here it does not, so its
    # lines take this handler, at the level asked for.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(level)
    _installed = handler
    return handler

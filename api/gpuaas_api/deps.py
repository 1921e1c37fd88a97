"""Shared route plumbing: the authenticated principal, the database, the router factory."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from pydantic import StringConstraints

from .common import Cursor, Limit
from .config import OperationSettings, Settings
from .db import Database
from .errors import ERROR_RESPONSES
from .iam.auth import Principal, authenticate

Caller = Annotated[Principal, Depends(authenticate)]
CursorParam = Annotated[Cursor | None, Query(description="opaque cursor from a previous page")]
LimitParam = Annotated[Limit, Query(description="page size")]


def get_db(request: Request) -> Database:
    return request.app.state.db


DB = Annotated[Database, Depends(get_db)]


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


AppSettings = Annotated[Settings, Depends(get_settings)]


def get_operation_settings(request: Request) -> OperationSettings:
    """The settings runs need (state dir, SSH key, timeouts): the app's, else read once and kept."""
    settings = getattr(request.app.state, "operation_settings", None)
    if settings is None:
        settings = request.app.state.operation_settings = OperationSettings()
    return settings


RunSettings = Annotated[OperationSettings, Depends(get_operation_settings)]
_ReasonText = Annotated[str, StringConstraints(min_length=8, max_length=500, pattern=r"^[\x20-\x7e]+$")]
_REASON_HEADER = Header(alias="X-Break-Glass-Reason", description="why this break-glass access is needed (audited)")
BreakGlassReason = Annotated[_ReasonText, _REASON_HEADER]
OptionalBreakGlassReason = Annotated[_ReasonText | None, _REASON_HEADER]


def router(tag: str) -> APIRouter:
    """Every router documents the error envelope for every error status it can answer with."""
    return APIRouter(tags=[tag], responses=ERROR_RESPONSES)

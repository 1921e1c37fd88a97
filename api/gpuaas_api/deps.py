"""Shared route plumbing: the authenticated principal, the database, the router factory."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from .common import Cursor, Limit
from .db import Database
from .errors import ERROR_RESPONSES
from .iam.auth import Principal, authenticate

Caller = Annotated[Principal, Depends(authenticate)]
CursorParam = Annotated[Cursor | None, Query(description="opaque cursor from a previous page")]
LimitParam = Annotated[Limit, Query(description="page size")]


def get_db(request: Request) -> Database:
    return request.app.state.db


DB = Annotated[Database, Depends(get_db)]


def router(tag: str) -> APIRouter:
    """Every router documents the error envelope for every error status it can answer with."""
    return APIRouter(tags=[tag], responses=ERROR_RESPONSES)

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import Path, Query, Request

from ..common import Page, Slug, decode_cursor, keyset_page, page_of
from ..content.routes import content_store
from ..content.store import InvalidDigest
from ..deps import DB, Caller, CursorParam, LimitParam, router
from ..errors import unprocessable
from . import service
from .schemas import (
    App,
    AppCreate,
    Artifact,
    ArtifactCreate,
    ArtifactStatus,
    ArtifactTransition,
    Version,
    VersionCreate,
    VersionString,
    VersionTransition,
)

api = router("catalog")
SlugPath = Annotated[Slug, Path()]
VersionPath = Annotated[VersionString, Path()]


@api.post("/v1/catalog/apps", response_model=App, status_code=201)
def create_app(body: AppCreate, caller: Caller, db: DB):
    caller.require("apps.catalog.write")
    with db.transaction() as conn:
        return service.create_app(conn, caller, body)


@api.get("/v1/catalog/apps", response_model=Page[App])
def list_apps(caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        return keyset_page(conn, "app_manifests", cursor, limit)


@api.get("/v1/catalog/apps/{slug}", response_model=App)
def get_app(slug: SlugPath, caller: Caller, db: DB):
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        return service.get_app(conn, slug)


@api.post("/v1/catalog/apps/{slug}/artifacts", response_model=Artifact, status_code=201)
def create_artifact(slug: SlugPath, body: ArtifactCreate, caller: Caller, db: DB, request: Request):
    caller.require("apps.catalog.write")
    if body.kind == "collection":
        # A collection artifact is runnable content: its build must be in the content store first.
        digest = body.reference.rpartition("@")[2]
        try:
            stored = content_store(request.app).has(digest)
        except InvalidDigest:
            raise unprocessable("invalid_digest", "a collection is pinned by sha256:<64 lowercase hex>",
                                reference=body.reference) from None
        if not stored:
            raise unprocessable("artifact_content_missing", f"the content store has no {digest}: upload the "
                                "collection build first (PUT /v1/content/{digest}, or gpuaas apps register)",
                                digest=digest)
    with db.transaction() as conn:
        return service.create_artifact(conn, caller, slug, body.kind, body.reference, body.signer_public_key)


@api.get("/v1/catalog/apps/{slug}/artifacts", response_model=Page[Artifact])
def list_artifacts(slug: SlugPath, caller: Caller, db: DB,
                   status: Annotated[ArtifactStatus | None, Query()] = None,
                   cursor: CursorParam = None, limit: LimitParam = 50):
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        service.get_app(conn, slug)
        rows = conn.execute(
            """SELECT * FROM artifacts WHERE app_slug = %s AND (%s::text IS NULL OR status = %s) AND seq > %s
               ORDER BY seq LIMIT %s""",
            (slug, status, status, decode_cursor(cursor) or 0, limit + 1),
        ).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/catalog/artifacts/{artifact_id}", response_model=Artifact)
def get_artifact(artifact_id: UUID, caller: Caller, db: DB):
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        return service.get_artifact(conn, artifact_id)


@api.post("/v1/catalog/artifacts/{artifact_id}/transitions", response_model=Artifact)
def transition_artifact(artifact_id: UUID, body: ArtifactTransition, caller: Caller, db: DB):
    """Move an artifact through draft → staged → canary → active → deprecated → retired (canary → staged
    rolls back). Audited with actor, before, after and reason."""
    caller.require("apps.catalog.write")
    with db.transaction() as conn:
        return service.transition_artifact(conn, caller, artifact_id, body.to, body.reason)


@api.post("/v1/catalog/apps/{slug}/versions", response_model=Version, status_code=201)
def create_version(slug: SlugPath, body: VersionCreate, caller: Caller, db: DB):
    caller.require("apps.catalog.write")
    with db.transaction() as conn:
        return service.create_version(conn, caller, slug, body)


@api.get("/v1/catalog/apps/{slug}/versions", response_model=Page[Version])
def list_versions(slug: SlugPath, caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        service.get_app(conn, slug)
        rows = conn.execute(service.VERSION_SELECT + " WHERE v.app_slug = %s AND v.seq > %s ORDER BY v.seq LIMIT %s",
                            (slug, decode_cursor(cursor) or 0, limit + 1)).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/catalog/apps/{slug}/versions/{version}", response_model=Version)
def get_version(slug: SlugPath, version: VersionPath, caller: Caller, db: DB):
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        return service.get_version(conn, slug, version)


@api.post("/v1/catalog/apps/{slug}/versions/{version}/transitions", response_model=Version)
def transition_version(slug: SlugPath, version: VersionPath, body: VersionTransition, caller: Caller, db: DB):
    """Publish (draft → active, only while the artifact is active) or deprecate a version. Audited."""
    caller.require("apps.catalog.write")
    with db.transaction() as conn:
        return service.transition_version(conn, caller, slug, version, body.to, body.reason)

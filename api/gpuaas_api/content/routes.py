"""Content routes: upload a collection tarball under its sha256 digest, check for it, download it.

The upload is streamed into the store (the app-wide body limit does not apply to it: it has its own,
GPUAAS_MAX_CONTENT_BYTES) and is kept only when the bytes hash to the digest in the path."""

from __future__ import annotations

from typing import Annotated, Any

import psycopg
from fastapi import FastAPI, Path, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from .. import errors
from ..audit import service as audit
from ..catalog.service import publication
from ..config import OperationSettings
from ..deps import DB, AppSettings, Caller, router
from ..iam.auth import Principal
from ..location import LocatedRoute
from .store import DIGEST_PATTERN, ContentMissing, ContentStore, ContentTooLarge, DigestMismatch, embedded_store

api = router("content")
api.route_class = LocatedRoute  # Location on 201/202 (gpuaas_api.location)
# BodyLimitMiddleware leaves requests under this prefix to these routes, which stream the body.
STREAMED_PREFIX = "/v1/content/"
# The store is addressed by digest, and each digest is readable in the scopes that uploaded it (table content_scopes):
# a tenant's private build is not another tenant's to read, whoever learns its sha256.
UPLOAD = "apps.content.upload"
DigestPath = Annotated[str, Path(pattern=DIGEST_PATTERN, description="sha256:<64 lowercase hex>")]
_BYTES = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}


class StoredContent(BaseModel):
    digest: str
    size: int
    created: bool


def content_store(app: FastAPI) -> ContentStore:
    """The app's store: app.state.content_store if set, else the database's, with this machine's copies
    under the state dir."""
    store = getattr(app.state, "content_store", None)
    if store is None:
        settings = getattr(app.state, "operation_settings", None) or OperationSettings()
        store = app.state.content_store = embedded_store(settings.state_dir, app.state.db)
    return store


def readable(conn: psycopg.Connection, caller: Principal, digest: str) -> bool:
    """Whether the caller may read this digest, or learn that it is stored: a platform principal (no tenant)
    always; a tenant's principal when its tenant or the platform uploaded it (platform content is every
    tenant's). Anything else answers as content that does not exist."""
    if caller.tenant_id is None:
        return True
    return conn.execute("SELECT 1 FROM content_scopes WHERE digest = %s AND (tenant_id IS NULL OR tenant_id = %s)",
                        (digest, caller.tenant_id)).fetchone() is not None


def _too_large(max_bytes: int) -> Response:
    # Connection: close, because the rest of the body is never read.
    return errors.envelope(413, "payload_too_large", f"content exceeds {max_bytes} bytes",
                           {"max_bytes": max_bytes}, {"Connection": "close"})


@api.put("/v1/content/{digest}", operation_id="content_put",
         response_model=StoredContent, status_code=201,
         responses={**errors.responses("artifact_digest_mismatch", "invalid_digest"),
                    200: {"model": StoredContent, "description": "Already stored"}},
         openapi_extra={"requestBody": {"required": True, "content": _BYTES}})
async def put_content(digest: DigestPath, request: Request, response: Response, caller: Caller, db: DB,
                      settings: AppSettings):
    """Store a collection tarball (the raw bytes) under its digest: 201 when stored for the caller's scope (its
    tenant, or the platform), 200 when that scope had already stored it, 422 artifact_digest_mismatch (nothing
    stored) when the bytes hash to another digest. Publishers (`apps.content.upload`, platform or tenant); every
    upload is audited with the digest."""
    caller.require_anywhere(UPLOAD)
    limit = settings.max_content_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return _too_large(limit)
    try:
        with content_store(request.app).upload(digest, max_bytes=limit) as upload:
            async for chunk in request.stream():
                upload.write(chunk)
            created = await run_in_threadpool(_commit, db, caller, upload, digest)
    except ContentTooLarge:
        return _too_large(limit)
    except DigestMismatch as exc:
        raise errors.unprocessable("artifact_digest_mismatch", "the content does not hash to the digest it was "
                                   "sent under; nothing was stored", expected=exc.expected, actual=exc.actual) from None
    response.status_code = 201 if created else 200
    return StoredContent(digest=digest, size=upload.size, created=created)


def _commit(db, caller, upload, digest: str) -> bool:
    """Keeps the upload, records it for the uploader's scope and audits it, also when the scope already held the
    digest: who published what. The scope and the audit row are the uploader's own tenant's (the platform's for
    a principal outside any tenant), whichever binding let it upload: a tenant's user publishing through a
    platform binding still uploads as its tenant. `created` is for that scope alone: whether another tenant
    stored the same bytes is not the caller's to learn."""
    tenant_id = caller.tenant_id
    with db.transaction() as conn:
        upload.commit(conn)
        created = conn.execute("INSERT INTO content_scopes (digest, tenant_id) VALUES (%s, %s) ON CONFLICT DO NOTHING "
                               "RETURNING digest", (digest, tenant_id)).fetchone() is not None
        audit.record(conn, caller, "apps.catalog.content.upload", "content", digest,
                     after=publication(caller, tenant_id, digest, size=upload.size, created=created),
                     context={"tenant_id": tenant_id})
    return created


def _stored(request: Request, caller, db, digest: str, read) -> Any:
    caller.require_anywhere(UPLOAD)
    with db.transaction() as conn:
        if not readable(conn, caller, digest):
            raise errors.not_found("content", digest)
    try:
        return read(content_store(request.app), digest)
    except ContentMissing:
        raise errors.not_found("content", digest) from None


@api.head("/v1/content/{digest}", operation_id="content_head",
          responses={200: {"description": "Stored (Content-Length: its size)"}})
def head_content(digest: DigestPath, request: Request, caller: Caller, db: DB):
    """Whether the store holds this digest for the caller (its tenant's or the platform's uploads)."""
    size = _stored(request, caller, db, digest, ContentStore.size)
    return Response(status_code=200, media_type="application/octet-stream",
                    headers={"Content-Length": str(size), "ETag": f'"{digest}"'})


@api.get("/v1/content/{digest}", operation_id="content_get", response_class=FileResponse,
         responses={200: {"content": _BYTES, "description": "The stored bytes"}})
def get_content(digest: DigestPath, request: Request, caller: Caller, db: DB):
    """The stored bytes, to the scopes that uploaded them (and to every tenant for the platform's). They hashed
    to the digest when stored; whoever runs them verifies them again."""
    return FileResponse(_stored(request, caller, db, digest, ContentStore.path), media_type="application/octet-stream",
                        headers={"ETag": f'"{digest}"'})

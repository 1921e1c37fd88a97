"""Content routes: upload a collection tarball under its sha256 digest, check for it, download it.

The upload is streamed into the store (the app-wide body limit does not apply to it: it has its own,
GPUAAS_MAX_CONTENT_BYTES) and is kept only when the bytes hash to the digest in the path."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Path, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from .. import errors
from ..audit import service as audit
from ..catalog.service import publication
from ..config import OperationSettings
from ..deps import DB, AppSettings, Caller, router
from ..location import LocatedRoute
from .store import DIGEST_PATTERN, ContentMissing, ContentStore, ContentTooLarge, DigestMismatch, embedded_store

api = router("content")
api.route_class = LocatedRoute  # Location on 201/202 (gpuaas_api.location)
# BodyLimitMiddleware leaves requests under this prefix to these routes, which stream the body.
STREAMED_PREFIX = "/v1/content/"
# The store is addressed by digest only: a build is found by whoever knows its sha256, which only its bytes give.
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
    """Store a collection tarball (the raw bytes) under its digest: 201 when stored, 200 when it was
    already there, 422 artifact_digest_mismatch (nothing stored) when the bytes hash to another digest.
    Publishers (`apps.content.upload`, platform or tenant); every upload is audited with the digest."""
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
    """Keeps the upload and audits it, also when the store already held the digest: who published what. A
    platform publisher's row is the platform's, a tenant publisher's its tenant's."""
    tenant_id = None if caller.permits(UPLOAD, project_id=caller.project_id) else caller.tenant_id
    with db.transaction() as conn:
        created = upload.commit(conn)[1]
        audit.record(conn, caller, "apps.catalog.content.upload", "content", digest,
                     after=publication(caller, tenant_id, digest, size=upload.size, created=created),
                     context={"tenant_id": tenant_id})
    return created


def _stored(request: Request, caller, digest: str, read) -> Any:
    caller.require_anywhere(UPLOAD)
    try:
        return read(content_store(request.app), digest)
    except ContentMissing:
        raise errors.not_found("content", digest) from None


@api.head("/v1/content/{digest}", operation_id="content_head",
          responses={200: {"description": "Stored (Content-Length: its size)"}})
def head_content(digest: DigestPath, request: Request, caller: Caller):
    """Whether the store holds this digest."""
    size = _stored(request, caller, digest, ContentStore.size)
    return Response(status_code=200, media_type="application/octet-stream",
                    headers={"Content-Length": str(size), "ETag": f'"{digest}"'})


@api.get("/v1/content/{digest}", operation_id="content_get", response_class=FileResponse,
         responses={200: {"content": _BYTES, "description": "The stored bytes"}})
def get_content(digest: DigestPath, request: Request, caller: Caller):
    """The stored bytes. They hashed to the digest when stored; whoever runs them verifies them again."""
    return FileResponse(_stored(request, caller, digest, ContentStore.path), media_type="application/octet-stream",
                        headers={"ETag": f'"{digest}"'})

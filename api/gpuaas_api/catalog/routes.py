from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from fastapi import Path, Query, Request, Response

from .. import docs, errors
from ..common import Page, Slug, decode_cursor, page_of
from ..content.routes import content_store
from ..content.routes import readable as content_readable
from ..content.store import InvalidDigest
from ..deps import DB, AppSettings, Caller, CursorParam, LimitParam, get_operation_settings, router
from ..errors import not_found, unprocessable
from ..iam.service import get_tenant
from ..location import LocatedRoute
from . import events, gates, scope, service, smoke
from .files import check_source, parse_file_reference
from .schemas import (
    App,
    AppCreate,
    Artifact,
    ArtifactCreate,
    ArtifactStatus,
    ArtifactTransition,
    CatalogEvent,
    Gate,
    SmokeGateCreate,
    StagingGateCreate,
    Version,
    VersionCreate,
    VersionString,
    VersionTransition,
)

api = router("catalog")
api.route_class = LocatedRoute  # Location on 201/202 (gpuaas_api.location)
SlugPath = Annotated[Slug, Path()]
VersionPath = Annotated[VersionString, Path()]


@api.post("/v1/catalog/apps", operation_id="catalog_apps_create", response_model=App, status_code=201,
          openapi_extra=docs.example({'slug': 'hpc-cluster',
                                      'display_name': 'HPC cluster',
                                      'description': 'A batch scheduler with compute nodes',
                                      'runtime_backend': 'bare_metal'}),
          responses=errors.responses("app_slug_namespace"))
def create_app(body: AppCreate, caller: Caller, db: DB):
    """Register an app in the platform catalog (platform publishers), or with `tenant_id` as a private app of
    that tenant (its publishers), which only the tenant sees and uses."""
    with db.transaction() as conn:
        tenant = get_tenant(conn, body.tenant_id) if body.tenant_id else None
        scope.require_publish(caller, body.tenant_id)
        scope.check_slug(conn, body.slug, tenant)
        return service.create_app(conn, caller, body)


@api.get("/v1/catalog/apps", operation_id="catalog_apps_list", response_model=Page[App])
def list_apps(caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    """The catalog's apps the caller sees (the platform's, and its own tenant's private ones), oldest first."""
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        rows = conn.execute(
            """SELECT * FROM app_manifests WHERE (tenant_id IS NULL OR tenant_id = %s) AND seq > %s
               ORDER BY seq LIMIT %s""",
            (caller.tenant_id, decode_cursor(cursor) or 0, limit + 1)).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/catalog/apps/{slug}", operation_id="catalog_apps_get", response_model=App)
def get_app(slug: SlugPath, caller: Caller, db: DB):
    """One catalog app by slug."""
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        return scope.app_for(conn, caller, slug)


@api.post("/v1/catalog/apps/{slug}/artifacts", operation_id="catalog_artifacts_create",
          openapi_extra=docs.example({'kind': 'collection',
                                      'reference': 'sha256:5f70bf18a086007016e948b04aed3b82'
                                                   '103a36bea41755b6cddfaf10ace3c6ef'}),
          responses=errors.responses("invalid_digest", "artifact_content_missing", "reference_not_pinned",
                                     "invalid_reference", "file_source_not_allowed"),
          response_model=Artifact, status_code=201)
def create_artifact(slug: SlugPath, body: ArtifactCreate, caller: Caller, db: DB, request: Request,
                    settings: AppSettings):
    """Register a signed artifact (a collection build, an image, a file by digest) of an app, in the app's catalog
    (its publishers); it starts in the draft state until verified. A file artifact (`<name>@sha256:<hex>`) is in
    the content store, or behind a `source` URL under a prefix the operator allows."""
    with db.transaction() as conn:
        app_tenant_id = scope.app_for(conn, caller, slug)["tenant_id"]
        scope.require_publish(caller, app_tenant_id)
    file = None
    if body.kind == "file":
        parse_file_reference(body.reference)
        file = {"media_type": body.media_type or "application/octet-stream", "size": body.size}
        if body.source:
            file["source"] = check_source(body.source, settings.file_artifact_sources)
    if body.kind == "collection" or (body.kind == "file" and not body.source):
        # A collection artifact is runnable content, a file one the bytes its runs place: in the content store first.
        digest = body.reference.rpartition("@")[2]
        try:
            stored = content_store(request.app).has(digest)
        except InvalidDigest:
            raise unprocessable("invalid_digest", "a collection is pinned by sha256:<64 lowercase hex>",
                                reference=body.reference) from None
        if stored:
            # Another tenant's private build is missing content here: registering it would tell the caller it is
            # stored, and let the caller's instances run it.
            with db.transaction() as conn:
                stored = content_readable(conn, caller, digest)
        if not stored:
            raise unprocessable("artifact_content_missing", f"the content store has no {digest}: upload the "
                                f"{body.kind} first (PUT /v1/content/{{digest}}, gpuaas apps publish or gpuaas "
                                "artifacts upload-file)", digest=digest)
        if file is not None:
            file["size"] = content_store(request.app).size(digest)
    with db.transaction() as conn:
        return service.create_artifact(conn, caller, slug, body.kind, body.reference, body.signer_public_key, file)


@api.get("/v1/catalog/apps/{slug}/artifacts", operation_id="catalog_artifacts_list", response_model=Page[Artifact])
def list_artifacts(slug: SlugPath, caller: Caller, db: DB,
                   status: Annotated[ArtifactStatus | None, Query()] = None,
                   cursor: CursorParam = None, limit: LimitParam = 50):
    """The app's artifacts, oldest first, optionally by state."""
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        scope.app_for(conn, caller, slug)
        rows = conn.execute(
            """SELECT * FROM artifacts WHERE app_slug = %s AND (%s::text IS NULL OR status = %s) AND seq > %s
               ORDER BY seq LIMIT %s""",
            (slug, status, status, decode_cursor(cursor) or 0, limit + 1),
        ).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/catalog/artifacts/{artifact_id}", operation_id="catalog_artifacts_get", response_model=Artifact)
def get_artifact(artifact_id: UUID, caller: Caller, db: DB):
    """One artifact."""
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        return scope.artifact_for(conn, caller, artifact_id)


@api.post("/v1/catalog/artifacts/{artifact_id}/transitions", operation_id="catalog_artifacts_transition",
          openapi_extra=docs.example({'to': 'active', 'reason': 'signature verified, smoke test passed'}),
          responses=errors.responses("illegal_transition", "unknown_state", "artifact_in_use", "gate_required",
                                     "retire_grace_period"),
          response_model=Artifact)
def transition_artifact(artifact_id: UUID, body: ArtifactTransition, caller: Caller, db: DB, settings: AppSettings):
    """Move an artifact through draft → staged → canary → active → deprecated → retired (canary → staged
    rolls back). The app's publishers; audited with actor, before, after, reason and digest. A collection build
    becomes staged through its staging gate (POST .../gates; 409 gate_required here); retired waits
    promotion_retire_grace_seconds after deprecation. `skip_gates`: a platform admin's move past them, recorded."""
    with db.transaction() as conn:
        scope.require_publish(caller, scope.artifact_for(conn, caller, artifact_id)["app_tenant_id"])
        return service.transition_artifact(conn, caller, artifact_id, body.to, body.reason, gates=settings,
                                           skip_gates=body.skip_gates)


@api.post("/v1/catalog/artifacts/{artifact_id}/gates", operation_id="catalog_artifacts_gates_start",
          openapi_extra=docs.example({'kind': 'staging', 'reason': 'release 1.4.0'}),
          responses=errors.responses("gate_not_applicable"), response_model=Gate, status_code=202)
def start_artifact_gate(artifact_id: UUID, body: StagingGateCreate, caller: Caller, db: DB, settings: AppSettings,
                        response: Response):
    """Start the staging gate of a draft collection artifact (the app's publishers): the platform's checks on its
    exact build (promotion_staging_checks: descriptor, ansible-lint production profile, ansible-test sanity), run
    by a worker; a pass makes the artifact staged. An open staging gate of the artifact is returned (200) rather
    than a second. Follow it at GET /v1/catalog/gates/{id}."""
    with db.transaction() as conn:
        scope.require_publish(caller, scope.artifact_for(conn, caller, artifact_id)["app_tenant_id"])
        gate, created = gates.start_staging(conn, caller, artifact_id, body.reason,
                                            settings.promotion_staging_checks)
    if not created:
        response.status_code = 200
    return gate


@api.get("/v1/catalog/gates/{gate_id}", operation_id="catalog_gates_get", response_model=Gate)
def get_gate(gate_id: UUID, caller: Caller, db: DB):
    """One promotion gate (staging or smoke): its status, each check's result with its findings (rule, path,
    line) and the tail of the tool's output, the reason it failed."""
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        gate = gates.get_gate(conn, gate_id)
        try:
            app = scope.app_for(conn, caller, gate["app_slug"])
        except errors.ApiError as exc:
            raise not_found("gate", gate_id) from exc
        return gates.for_reader(caller, gate, app["tenant_id"])


@api.get("/v1/catalog/apps/{slug}/gates", operation_id="catalog_gates_list", response_model=Page[Gate])
def list_gates(slug: SlugPath, caller: Caller, db: DB, artifact_id: Annotated[UUID | None, Query()] = None,
               version: Annotated[VersionString | None, Query()] = None,
               kind: Annotated[Literal["staging", "smoke"] | None, Query()] = None,
               status: Annotated[Literal["queued", "running", "passed", "failed"] | None, Query()] = None,
               cursor: CursorParam = None, limit: LimitParam = 50):
    """The app's promotion gates, oldest first, optionally of one artifact or version, kind or status."""
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        tenant_id = scope.app_for(conn, caller, slug)["tenant_id"]
        rows = gates.list_gates(conn, slug, after=decode_cursor(cursor) or 0, limit=limit, artifact_id=artifact_id,
                                version=version, kind=kind, status=status)
    items, nxt = page_of(rows, limit)
    return {"items": [gates.for_reader(caller, g, tenant_id) for g in items], "next_cursor": nxt}


@api.get("/v1/catalog/apps/{slug}/events", operation_id="catalog_events_list", response_model=Page[CatalogEvent])
def list_catalog_events(slug: SlugPath, caller: Caller, db: DB, artifact_id: Annotated[UUID | None, Query()] = None,
                        version: Annotated[VersionString | None, Query()] = None,
                        type: Annotated[str | None, Query(max_length=100)] = None,  # noqa: A002 - the field's name
                        cursor: CursorParam = None, limit: LimitParam = 50):
    """The app's catalog timeline, oldest first: each gate's start and outcome (with the correlation id of the
    request that started it), skipped gates; optionally of one artifact or version, or one type."""
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        tenant_id = scope.app_for(conn, caller, slug)["tenant_id"]
        version_id = service.get_version(conn, slug, version)["id"] if version else None
        rows = events.list_events(conn, slug, after=decode_cursor(cursor) or 0, limit=limit, artifact_id=artifact_id,
                                  app_version_id=version_id, event_type=type)
    items, nxt = page_of(rows, limit, key="id")
    return {"items": [gates.event_for_reader(caller, e, tenant_id) for e in items], "next_cursor": nxt}


@api.post("/v1/catalog/apps/{slug}/versions", operation_id="catalog_versions_create",
          openapi_extra=docs.example({'version': '1.2.0',
                                      'artifact_id': '4d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a',
                                      'adapter': {'roles': [{'name': 'controller', 'min': 1, 'max': 1},
                                                            {'name': 'compute', 'min': 1, 'max': 64}],
                                                  'actions': {'deploy': 'example.hpc.deploy',
                                                              'member_add': 'example.hpc.member_add',
                                                              'decommission': 'example.hpc.decommission'},
                                                  'targets': {'members': 'hpc_members'}}}),
          responses=errors.responses("artifact_mismatch", "artifact_retired", "workload_artifact_kind",
                                     "workload_artifact_required", "workload_not_declared", "invalid_parameters",
                                     "file_artifact_required", "file_not_declared", "file_artifact_kind"),
          response_model=Version, status_code=201)
def create_version(slug: SlugPath, body: VersionCreate, caller: Caller, db: DB):
    """Publish a version of an app (the app's publishers): its adapter spec, the artifact it runs, and its
    parameters schema."""
    with db.transaction() as conn:
        scope.require_publish(caller, scope.app_for(conn, caller, slug)["tenant_id"])
        return service.create_version(conn, caller, slug, body)


@api.get("/v1/catalog/apps/{slug}/versions", operation_id="catalog_versions_list", response_model=Page[Version])
def list_versions(slug: SlugPath, caller: Caller, db: DB, cursor: CursorParam = None, limit: LimitParam = 50):
    """The app's versions, oldest first."""
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        scope.app_for(conn, caller, slug)
        rows = conn.execute(service.VERSION_SELECT + " WHERE v.app_slug = %s AND v.seq > %s ORDER BY v.seq LIMIT %s",
                            (slug, decode_cursor(cursor) or 0, limit + 1)).fetchall()
    items, nxt = page_of(rows, limit)
    return {"items": items, "next_cursor": nxt}


@api.get("/v1/catalog/apps/{slug}/versions/{version}", operation_id="catalog_versions_get", response_model=Version)
def get_version(slug: SlugPath, version: VersionPath, caller: Caller, db: DB):
    """One version of an app."""
    caller.require_anywhere("apps.catalog.read")
    with db.transaction() as conn:
        scope.app_for(conn, caller, slug)
        return service.get_version(conn, slug, version)


@api.post("/v1/catalog/apps/{slug}/versions/{version}/transitions", operation_id="catalog_versions_transition",
          openapi_extra=docs.example({'to': 'active', 'reason': 'canary ran a week without incident'}),
          responses=errors.responses("illegal_transition", "unknown_state", "no_active_version",
                                     "artifact_not_active", "artifact_not_canary", "gate_required",
                                     "canary_instances_short"),
          response_model=Version)
def transition_version(slug: SlugPath, version: VersionPath, body: VersionTransition, caller: Caller, db: DB,
                       settings: AppSettings):
    """Move a version (the app's publishers; audited): draft → canary is the smoke gate's (POST .../gates),
    canary → active needs the operator's number of successful canary instances, draft → active only where
    neither is required; deprecate. `skip_gates`: a platform admin's move past them, recorded."""
    with db.transaction() as conn:
        scope.require_publish(caller, scope.app_for(conn, caller, slug)["tenant_id"])
        return service.transition_version(conn, caller, slug, version, body.to, body.reason, gates=settings,
                                          skip_gates=body.skip_gates)


@api.post("/v1/catalog/apps/{slug}/versions/{version}/gates", operation_id="catalog_versions_gates_start",
          openapi_extra=docs.example({'kind': 'smoke', 'project_id': '4d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a',
                                      'allocation_ids': ['0e1d2c3b-4a59-4687-a5b4-c3d2e1f0a9b8'],
                                      'topology': [{'role': 'replica', 'count': 1}],
                                      'reason': 'smoke run before canary'}),
          responses=errors.responses("illegal_transition", "artifact_not_canary", "not_entitled", "policy_denied",
                                     "compatibility_refused", "quota_exceeded", "host_in_use", "invalid_parameters",
                                     "allocation.unknown", "version_not_usable"),
          response_model=Gate, status_code=202)
def start_version_gate(slug: SlugPath, version: VersionPath, body: SmokeGateCreate, caller: Caller, db: DB,
                       settings: AppSettings, request: Request):
    """Start the smoke gate of a draft version (the app's publishers, who also create, deploy and decommission
    instances in the project named): one instance of it on the allocations named, deployed and then
    decommissioned through the ordinary operation path; a pass makes the version canary. An open smoke gate of
    the version is returned rather than a second. Follow it at GET /v1/catalog/gates/{id}."""
    with db.transaction() as conn:
        app = scope.app_for(conn, caller, slug)
        scope.require_publish(caller, app["tenant_id"])
        return smoke.start(conn, caller, app, service.get_version(conn, slug, version), body,
                           max_instances=settings.max_instances_per_project,
                           operation_settings=get_operation_settings(request))

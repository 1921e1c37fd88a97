"""Catalog queries and the artifact trust state machine, every transition audited."""

from __future__ import annotations

import hashlib
import json
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from ..audit import service as audit
from ..errors import conflict, not_found, unprocessable
from ..iam.auth import Principal
from .rules import ARTIFACT_TRANSITIONS, VERSION_NEEDS, VERSION_TRANSITIONS, check_transition, parse_reference

VERSION_SELECT = """
SELECT v.*, a.reference AS artifact_reference, a.status AS artifact_status, a.registry AS artifact_registry,
       a.kind AS artifact_kind, a.digest AS artifact_digest,
       w.reference AS workload_artifact_reference, w.status AS workload_artifact_status,
       w.registry AS workload_artifact_registry, w.repository AS workload_artifact_repository,
       w.digest AS workload_artifact_digest, w.signer_public_key AS workload_signer_public_key,
       m.tenant_id AS app_tenant_id
  FROM app_versions v JOIN artifacts a ON a.id = v.artifact_id
  JOIN app_manifests m ON m.slug = v.app_slug
  LEFT JOIN artifacts w ON w.id = v.workload_artifact_id
"""
# An artifact with the tenant whose private catalog its app is in (NULL: the platform catalog; catalog/scope.py).
ARTIFACT_SELECT = ("SELECT a.*, m.tenant_id AS app_tenant_id"
                   " FROM artifacts a JOIN app_manifests m ON m.slug = a.app_slug")


def digest_of(value: Any) -> str:
    """The sha256 of a JSON value in canonical form (sorted keys, no spaces): what a publication registered."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def publication(actor: Principal, tenant_id: UUID | None, digest: str, **more: Any) -> dict:
    """What the audit row of a publication records besides its actor columns: the publisher, the catalog it
    published to (tenant_id: a tenant's private one), and the digest of the content it pins."""
    return {"publisher": {"kind": actor.kind, "id": actor.id, "name": actor.name},
            "catalog": "platform" if tenant_id is None else "tenant", "tenant_id": tenant_id, "digest": digest,
            **more}


def _context(slug: str, tenant_id: UUID | None) -> dict:
    """The audit context of a catalog change: a private app's rows are its tenant's."""
    return {"app_slug": slug, "tenant_id": tenant_id}


def version_artifacts(version: dict) -> list[tuple[str, str]]:
    """(reference, status) of every artifact a version stands on: its collection build and, for an app
    with a workload, the workload's artifact."""
    pinned = [(version["artifact_reference"], version["artifact_status"])]
    if version.get("workload_artifact_id"):
        pinned.append((version["workload_artifact_reference"], version["workload_artifact_status"]))
    return pinned


def workload_image(version: dict) -> str | None:
    """The workload artifact as a run pulls it: `registry/repository@digest`, no tag."""
    if not version.get("workload_artifact_id"):
        return None
    return f"{version['workload_artifact_registry']}/{version['workload_artifact_repository']}@" \
           f"{version['workload_artifact_digest']}"


def get_app(conn: psycopg.Connection, slug: str) -> dict:
    row = conn.execute("SELECT * FROM app_manifests WHERE slug = %s", (slug,)).fetchone()
    if row is None:
        raise not_found("app", slug)
    return row


def get_artifact(conn: psycopg.Connection, artifact_id: UUID, *, lock: bool = False) -> dict:
    sql = ARTIFACT_SELECT + " WHERE a.id = %s" + (" FOR UPDATE OF a" if lock else "")  # noqa: S608 - constant
    row = conn.execute(sql, (artifact_id,)).fetchone()
    if row is None:
        raise not_found("artifact", artifact_id)
    return row


def get_version(conn: psycopg.Connection, slug: str, version: str) -> dict:
    row = conn.execute(VERSION_SELECT + " WHERE v.app_slug = %s AND v.version = %s",  # noqa: S608 - constant SQL
                       (slug, version)).fetchone()
    if row is None:
        raise not_found("app_version", f"{slug}@{version}")
    return row


def get_version_by_id(conn: psycopg.Connection, version_id: UUID) -> dict:
    row = conn.execute(VERSION_SELECT + " WHERE v.id = %s", (version_id,)).fetchone()
    if row is None:
        raise not_found("app_version", version_id)
    return row


def latest_active_version(conn: psycopg.Connection, slug: str) -> dict:
    row = conn.execute(VERSION_SELECT + " WHERE v.app_slug = %s AND v.status = 'active' ORDER BY v.seq DESC LIMIT 1",
                       (slug,)).fetchone()
    if row is None:
        raise conflict("no_active_version", f"app {slug} has no active version")
    return row


def create_app(conn, actor: Principal, body) -> dict:
    """An app in the platform catalog, or with body.tenant_id in that tenant's private one."""
    row = conn.execute(
        """INSERT INTO app_manifests (slug, display_name, description, runtime_backend, operating_modes, tenant_id)
           VALUES (%s, %s, %s, %s, %s, %s) RETURNING *""",
        (body.slug, body.display_name, body.description, body.runtime_backend,
         list(dict.fromkeys(body.operating_modes)), body.tenant_id),
    ).fetchone()
    registered = {k: row[k] for k in ("slug", "display_name", "description", "runtime_backend", "operating_modes")}
    audit.record(conn, actor, "apps.catalog.app.create", "app", row["slug"],
                 after=row | publication(actor, row["tenant_id"], digest_of(registered)),
                 context=_context(row["slug"], row["tenant_id"]))
    return row


def create_artifact(conn, actor: Principal, slug: str, kind: str, reference: str,
                    signer_public_key: str | None = None) -> dict:
    app = get_app(conn, slug)
    ref = parse_reference(reference)
    row = conn.execute(
        """INSERT INTO artifacts (app_slug, kind, reference, registry, repository, digest, signer_public_key)
           VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING *""",
        (slug, kind, reference, ref.registry, ref.repository, ref.digest, signer_public_key),
    ).fetchone()
    audit.record(conn, actor, "apps.catalog.artifact.create", "artifact", row["id"],
                 after=row | publication(actor, app["tenant_id"], row["digest"]),
                 context=_context(slug, app["tenant_id"]))
    return row


def transition_artifact(conn, actor: Principal, artifact_id: UUID, target: str, reason: str) -> dict:
    before = get_artifact(conn, artifact_id, lock=True)
    check_transition(ARTIFACT_TRANSITIONS, "artifact", before["status"], target)
    if target == "retired":
        # An instance uses the artifact when it runs it or can roll back to it.
        users = conn.execute(
            """SELECT count(*) AS n FROM app_instances i
                WHERE i.deleted_at IS NULL AND EXISTS (
                      SELECT 1 FROM app_versions v WHERE %s IN (v.artifact_id, v.workload_artifact_id)
                         AND v.id IN (i.app_version_id, i.previous_version_id))""",
            (artifact_id,),
        ).fetchone()["n"]
        if users:
            raise conflict("artifact_in_use", f"artifact is referenced by {users} instance(s) (running it or "
                           "keeping it as rollback target); cannot retire", instances=users)
    after = conn.execute("UPDATE artifacts SET status = %s, updated_at = now() WHERE id = %s RETURNING *",
                         (target, artifact_id)).fetchone()
    tenant_id = before["app_tenant_id"]
    audit.record(conn, actor, "apps.catalog.artifact.transition", "artifact", artifact_id,
                 before={"status": before["status"]}, after={"status": target}, reason=reason,
                 context=_context(before["app_slug"], tenant_id))
    # A version may only stand on artifacts its status allows (rules.VERSION_NEEDS): an active artifact
    # leaving active deprecates the versions on it; a canary one sent back to staged returns its canary
    # versions to draft.
    follow = {"active": ("active", "deprecated"), "canary": ("canary", "draft")}.get(before["status"])
    if follow and target not in VERSION_NEEDS.get(follow[0], ()):
        was, now = follow
        for version in conn.execute(
            """UPDATE app_versions SET status = %s, updated_at = now()
                WHERE %s IN (artifact_id, workload_artifact_id) AND status = %s RETURNING id, version""",
            (now, artifact_id, was),
        ).fetchall():
            audit.record(conn, actor, "apps.catalog.version.transition", "app_version", version["id"],
                         before={"status": was}, after={"status": now},
                         reason=f"artifact {artifact_id} moved to {target}: {reason}",
                         context=_context(before["app_slug"], tenant_id))
    return after


def _version_artifact(conn, slug: str, artifact_id: UUID, field: str) -> dict:
    artifact = get_artifact(conn, artifact_id)
    if artifact["app_slug"] != slug:
        raise unprocessable("artifact_mismatch", f"{field}: the artifact belongs to another app", field=field)
    if artifact["status"] == "retired":
        raise unprocessable("artifact_retired", f"{field}: a retired artifact cannot back a new version", field=field)
    return artifact


def create_version(conn, actor: Principal, slug: str, body) -> dict:
    app = get_app(conn, slug)
    _version_artifact(conn, slug, body.artifact_id, "artifact_id")
    workload = body.adapter.workload
    if workload and body.workload_artifact_id is None:
        raise unprocessable("workload_artifact_required", f"the adapter runs a workload: workload_artifact_id must "
                            f"name the version's {workload.artifact_kind} artifact")
    if body.workload_artifact_id is not None:
        if workload is None:
            raise unprocessable("workload_not_declared", "workload_artifact_id is set but the adapter declares "
                                "no workload")
        pinned = _version_artifact(conn, slug, body.workload_artifact_id, "workload_artifact_id")
        if pinned["kind"] != workload.artifact_kind:
            raise unprocessable("workload_artifact_kind", f"the workload artifact is of kind {pinned['kind']}; the "
                                f"adapter runs {workload.artifact_kind}", kind=pinned["kind"])
    row = conn.execute(
        """INSERT INTO app_versions (app_slug, version, artifact_id, workload_artifact_id, compatibility,
               runtime_profile, adapter)
           VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id""",
        (slug, body.version, body.artifact_id, body.workload_artifact_id, Jsonb(body.compatibility.model_dump()),
         Jsonb(body.runtime_profile), Jsonb(body.adapter.model_dump())),
    ).fetchone()
    version = get_version_by_id(conn, row["id"])
    audit.record(conn, actor, "apps.catalog.version.create", "app_version", row["id"],
                 after={"version": body.version, "artifact_id": body.artifact_id,
                        "workload_artifact_id": body.workload_artifact_id}
                 | publication(actor, app["tenant_id"], version["artifact_digest"],
                               workload_digest=version["workload_artifact_digest"],
                               adapter_digest=digest_of(version["adapter"])),
                 context=_context(slug, app["tenant_id"]))
    return version


def transition_version(conn, actor: Principal, slug: str, version: str, target: str, reason: str) -> dict:
    before = get_version(conn, slug, version)
    conn.execute("SELECT 1 FROM app_versions WHERE id = %s FOR UPDATE", (before["id"],))
    conn.execute("SELECT 1 FROM artifacts WHERE id IN (%s, %s) FOR SHARE",
                 (before["artifact_id"], before["workload_artifact_id"]))
    before = get_version_by_id(conn, before["id"])
    check_transition(VERSION_TRANSITIONS, "version", before["status"], target)
    for reference, status in version_artifacts(before):
        if target in VERSION_NEEDS and status not in VERSION_NEEDS[target]:
            raise conflict("artifact_not_active" if target == "active" else "artifact_not_canary",
                           f"a {target} version cannot stand on a {status} artifact ({reference})",
                           artifact_reference=reference, artifact_status=status)
    conn.execute("UPDATE app_versions SET status = %s, updated_at = now() WHERE id = %s", (target, before["id"]))
    audit.record(conn, actor, "apps.catalog.version.transition", "app_version", before["id"],
                 before={"status": before["status"]}, after={"status": target}, reason=reason,
                 context=_context(slug, before["app_tenant_id"]))
    return get_version_by_id(conn, before["id"])

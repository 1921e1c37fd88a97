"""Catalog queries and the artifact trust state machine, every transition audited."""

from __future__ import annotations

from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from ..audit import service as audit
from ..errors import conflict, not_found, unprocessable
from ..iam.auth import Principal
from .rules import ARTIFACT_TRANSITIONS, VERSION_TRANSITIONS, check_transition, parse_reference

VERSION_SELECT = """
SELECT v.*, a.reference AS artifact_reference, a.status AS artifact_status, a.registry AS artifact_registry
  FROM app_versions v JOIN artifacts a ON a.id = v.artifact_id
"""


def get_app(conn: psycopg.Connection, slug: str) -> dict:
    row = conn.execute("SELECT * FROM app_manifests WHERE slug = %s", (slug,)).fetchone()
    if row is None:
        raise not_found("app", slug)
    return row


def get_artifact(conn: psycopg.Connection, artifact_id: UUID, *, lock: bool = False) -> dict:
    sql = "SELECT * FROM artifacts WHERE id = %s" + (" FOR UPDATE" if lock else "")  # noqa: S608 - constant
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
    row = conn.execute(
        """INSERT INTO app_manifests (slug, display_name, description, runtime_backend, operating_modes)
           VALUES (%s, %s, %s, %s, %s) RETURNING *""",
        (body.slug, body.display_name, body.description, body.runtime_backend,
         list(dict.fromkeys(body.operating_modes))),
    ).fetchone()
    audit.record(conn, actor, "apps.catalog.app.create", "app", row["slug"], after=row,
                 context={"app_slug": row["slug"]})
    return row


def create_artifact(conn, actor: Principal, slug: str, kind: str, reference: str) -> dict:
    get_app(conn, slug)
    ref = parse_reference(reference)
    row = conn.execute(
        """INSERT INTO artifacts (app_slug, kind, reference, registry, repository, digest)
           VALUES (%s, %s, %s, %s, %s, %s) RETURNING *""",
        (slug, kind, reference, ref.registry, ref.repository, ref.digest),
    ).fetchone()
    audit.record(conn, actor, "apps.catalog.artifact.create", "artifact", row["id"], after=row,
                 context={"app_slug": slug})
    return row


def transition_artifact(conn, actor: Principal, artifact_id: UUID, target: str, reason: str) -> dict:
    before = get_artifact(conn, artifact_id, lock=True)
    check_transition(ARTIFACT_TRANSITIONS, "artifact", before["status"], target)
    if target == "retired":
        # An instance uses the artifact when it runs it or can roll back to it.
        users = conn.execute(
            """SELECT count(*) AS n FROM app_instances i
                WHERE i.deleted_at IS NULL AND EXISTS (
                      SELECT 1 FROM app_versions v WHERE v.artifact_id = %s
                         AND v.id IN (i.app_version_id, i.previous_version_id))""",
            (artifact_id,),
        ).fetchone()["n"]
        if users:
            raise conflict("artifact_in_use", f"artifact is referenced by {users} instance(s) (running it or "
                           "keeping it as rollback target); cannot retire", instances=users)
    after = conn.execute("UPDATE artifacts SET status = %s, updated_at = now() WHERE id = %s RETURNING *",
                         (target, artifact_id)).fetchone()
    audit.record(conn, actor, "apps.catalog.artifact.transition", "artifact", artifact_id,
                 before={"status": before["status"]}, after={"status": target}, reason=reason,
                 context={"app_slug": before["app_slug"]})
    if before["status"] == "active":
        # An active version may not reference a non-active artifact: deprecate those versions too.
        for version in conn.execute(
            """UPDATE app_versions SET status = 'deprecated', updated_at = now()
                WHERE artifact_id = %s AND status = 'active' RETURNING id, version""", (artifact_id,)
        ).fetchall():
            audit.record(conn, actor, "apps.catalog.version.transition", "app_version", version["id"],
                         before={"status": "active"}, after={"status": "deprecated"},
                         reason=f"artifact {artifact_id} moved to {target}: {reason}",
                         context={"app_slug": before["app_slug"]})
    return after


def create_version(conn, actor: Principal, slug: str, body) -> dict:
    get_app(conn, slug)
    artifact = get_artifact(conn, body.artifact_id)
    if artifact["app_slug"] != slug:
        raise unprocessable("artifact_mismatch", "artifact belongs to another app")
    if artifact["status"] == "retired":
        raise unprocessable("artifact_retired", "a retired artifact cannot back a new version")
    row = conn.execute(
        """INSERT INTO app_versions (app_slug, version, artifact_id, compatibility, runtime_profile, adapter)
           VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""",
        (slug, body.version, body.artifact_id, Jsonb(body.compatibility.model_dump()),
         Jsonb(body.runtime_profile), Jsonb(body.adapter.model_dump())),
    ).fetchone()
    version = get_version_by_id(conn, row["id"])
    audit.record(conn, actor, "apps.catalog.version.create", "app_version", row["id"],
                 after={"version": body.version, "artifact_id": body.artifact_id}, context={"app_slug": slug})
    return version


def transition_version(conn, actor: Principal, slug: str, version: str, target: str, reason: str) -> dict:
    before = get_version(conn, slug, version)
    conn.execute("SELECT 1 FROM app_versions WHERE id = %s FOR UPDATE", (before["id"],))
    conn.execute("SELECT 1 FROM artifacts WHERE id = %s FOR SHARE", (before["artifact_id"],))
    before = get_version_by_id(conn, before["id"])
    check_transition(VERSION_TRANSITIONS, "version", before["status"], target)
    if target == "active" and before["artifact_status"] != "active":
        raise conflict("artifact_not_active",
                       f"an active version cannot reference a {before['artifact_status']} artifact",
                       artifact_id=str(before["artifact_id"]), artifact_status=before["artifact_status"])
    conn.execute("UPDATE app_versions SET status = %s, updated_at = now() WHERE id = %s", (target, before["id"]))
    audit.record(conn, actor, "apps.catalog.version.transition", "app_version", before["id"],
                 before={"status": before["status"]}, after={"status": target}, reason=reason,
                 context={"app_slug": slug})
    return get_version_by_id(conn, before["id"])

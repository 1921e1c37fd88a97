"""Catalog queries and the artifact trust state machine, every transition audited."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from ..audit import service as audit
from ..errors import conflict, not_found, unprocessable
from ..iam.auth import Principal
from . import events, files
from .rules import (
    ARTIFACT_TRANSITIONS,
    VERSION_NEEDS,
    VERSION_TRANSITIONS,
    check_transition,
    parse_reference,
    version_gate,
)

VERSION_SELECT = """
SELECT v.*, a.reference AS artifact_reference, a.status AS artifact_status, a.registry AS artifact_registry,
       a.kind AS artifact_kind, a.digest AS artifact_digest,
       w.reference AS workload_artifact_reference, w.status AS workload_artifact_status,
       w.registry AS workload_artifact_registry, w.repository AS workload_artifact_repository,
       w.digest AS workload_artifact_digest, w.signer_public_key AS workload_signer_public_key,
       m.tenant_id AS app_tenant_id,
       (SELECT coalesce(jsonb_object_agg(vf.name, jsonb_build_object(
                   'artifact_id', f.id, 'reference', f.reference, 'digest', f.digest, 'status', f.status,
                   'size', f.size, 'media_type', f.media_type, 'source', f.source)), '{}'::jsonb)
          FROM version_files vf JOIN artifacts f ON f.id = vf.artifact_id WHERE vf.version_id = v.id) AS files
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
    """(reference, status) of every artifact a version stands on: its collection build, for an app
    with a workload the workload's artifact, and its files."""
    pinned = [(version["artifact_reference"], version["artifact_status"])]
    if version.get("workload_artifact_id"):
        pinned.append((version["workload_artifact_reference"], version["workload_artifact_status"]))
    pinned += [(f["reference"], f["status"]) for f in (version.get("files") or {}).values()]
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
                    signer_public_key: str | None = None, file: dict | None = None) -> dict:
    """An artifact in draft; `file` ({size, media_type, source}) for a file artifact, whose reference is
    `<name>@sha256:<hex>` (registry '', repository its name)."""
    app = get_app(conn, slug)
    if kind == "file":
        name, digest = files.parse_file_reference(reference)
        registry, repository = "", name
    else:
        ref = parse_reference(reference)
        registry, repository, digest = ref.registry, ref.repository, ref.digest
    file = file or {}
    row = conn.execute(
        """INSERT INTO artifacts (app_slug, kind, reference, registry, repository, digest, signer_public_key,
                                  size, media_type, source)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *""",
        (slug, kind, reference, registry, repository, digest, signer_public_key, file.get("size"),
         file.get("media_type"), file.get("source")),
    ).fetchone()
    audit.record(conn, actor, "apps.catalog.artifact.create", "artifact", row["id"],
                 after=row | publication(actor, app["tenant_id"], row["digest"]),
                 context=_context(slug, app["tenant_id"]))
    return row


def check_artifact_gates(conn, actor: Principal, artifact: dict, target: str, settings, skip_gates: bool,
                         reason: str) -> list[str]:
    """A move by hand that a gate guards is refused: a collection build's draft -> staged is its staging gate's
    (409 gate_required) while the operator names staging checks; deprecated -> retired waits the grace period
    (409 retire_grace_period). `skip_gates` (apps.catalog.gates.skip: platform admins) moves past them, recorded
    as a gate.skipped event; returns the gates skipped."""
    if skip_gates:
        actor.require("apps.catalog.gates.skip")
    refusals = []
    if (artifact["status"], target) == ("draft", "staged") and artifact["kind"] == "collection" \
            and settings.promotion_staging_checks:
        refusals.append(("staging", conflict(
            "gate_required", "a collection build becomes staged through a passed staging gate ("
            f"{', '.join(settings.promotion_staging_checks)} on the exact build)", gate="staging",
            route=f"POST /v1/catalog/artifacts/{artifact['id']}/gates")))
    if target == "retired":
        retire_after = artifact["status_changed_at"] + timedelta(seconds=settings.promotion_retire_grace_seconds)
        if conn.execute("SELECT now() < %s AS early", (retire_after,)).fetchone()["early"]:
            refusals.append(("retire_grace", conflict(
                "retire_grace_period", f"a deprecated artifact is retired {settings.promotion_retire_grace_seconds} s "
                f"after its deprecation at the earliest: after {retire_after.isoformat()}",
                retire_after=retire_after.isoformat())))
    if refusals and not skip_gates:
        raise refusals[0][1]
    skipped = [gate for gate, _ in refusals]
    if skipped:
        events.append(conn, {"slug": artifact["app_slug"], "tenant_id": artifact["app_tenant_id"]}, "gate.skipped",
                      {"gates": skipped, "from": artifact["status"], "to": target, "reason": reason,
                       "by": {"kind": actor.kind, "id": actor.id, "name": actor.name}},
                      artifact_id=artifact["id"])
    return skipped


def transition_artifact(conn, actor: Principal, artifact_id: UUID, target: str, reason: str, *, gates=None,
                        skip_gates: bool = False) -> dict:
    """Move an artifact (legal moves only; not retired while an instance uses it). `gates`: the promotion
    settings a move by hand answers to (check_artifact_gates); None for the moves the platform makes itself (a
    passed staging gate)."""
    before = get_artifact(conn, artifact_id, lock=True)
    check_transition(ARTIFACT_TRANSITIONS, "artifact", before["status"], target)
    if target == "retired":
        # An instance uses the artifact when it runs it or can roll back to it.
        users = conn.execute(
            """SELECT count(*) AS n FROM app_instances i
                WHERE i.deleted_at IS NULL AND EXISTS (
                      SELECT 1 FROM app_versions v WHERE (%s IN (v.artifact_id, v.workload_artifact_id)
                             OR EXISTS (SELECT 1 FROM version_files vf WHERE vf.version_id = v.id
                                           AND vf.artifact_id = %s))
                         AND v.id IN (i.app_version_id, i.previous_version_id))""",
            (artifact_id, artifact_id),
        ).fetchone()["n"]
        if users:
            raise conflict("artifact_in_use", f"artifact is referenced by {users} instance(s) (running it or "
                           "keeping it as rollback target); cannot retire", instances=users)
    skipped = check_artifact_gates(conn, actor, before, target, gates, skip_gates, reason) if gates else []
    after = conn.execute("""UPDATE artifacts SET status = %s, updated_at = now(), status_changed_at = now()
                              WHERE id = %s RETURNING *""", (target, artifact_id)).fetchone()
    tenant_id = before["app_tenant_id"]
    audit.record(conn, actor, "apps.catalog.artifact.transition", "artifact", artifact_id,
                 before={"status": before["status"]},
                 after={"status": target} | ({"skipped_gates": skipped} if skipped else {}), reason=reason,
                 context=_context(before["app_slug"], tenant_id))
    # A version may only stand on artifacts its status allows (rules.VERSION_NEEDS): an active artifact
    # leaving active deprecates the versions on it; a canary one sent back to staged returns its canary
    # versions to draft.
    follow = {"active": ("active", "deprecated"), "canary": ("canary", "draft")}.get(before["status"])
    if follow and target not in VERSION_NEEDS.get(follow[0], ()):
        was, now = follow
        for version in conn.execute(
            """UPDATE app_versions SET status = %s, updated_at = now()
                WHERE (%s IN (artifact_id, workload_artifact_id)
                       OR id IN (SELECT version_id FROM version_files WHERE artifact_id = %s))
                  AND status = %s RETURNING id, version""",
            (now, artifact_id, artifact_id, was),
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
    pinned_files = files.version_files(conn, slug, body.adapter, body.files)
    row = conn.execute(
        """INSERT INTO app_versions (app_slug, version, artifact_id, workload_artifact_id, compatibility,
               runtime_profile, adapter)
           VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id""",
        (slug, body.version, body.artifact_id, body.workload_artifact_id, Jsonb(body.compatibility.model_dump()),
         Jsonb(body.runtime_profile), Jsonb(body.adapter.model_dump())),
    ).fetchone()
    for name, artifact in pinned_files.items():
        conn.execute("INSERT INTO version_files (version_id, name, artifact_id) VALUES (%s, %s, %s)",
                     (row["id"], name, artifact["id"]))
    version = get_version_by_id(conn, row["id"])
    audit.record(conn, actor, "apps.catalog.version.create", "app_version", row["id"],
                 after={"version": body.version, "artifact_id": body.artifact_id,
                        "workload_artifact_id": body.workload_artifact_id, "files": body.files}
                 | publication(actor, app["tenant_id"], version["artifact_digest"],
                               workload_digest=version["workload_artifact_digest"],
                               file_digests={n: f["digest"] for n, f in version["files"].items()},
                               adapter_digest=digest_of(version["adapter"])),
                 context=_context(slug, app["tenant_id"]))
    return version


def check_version_artifacts(version: dict, target: str) -> None:
    """A version in `target` stands only on artifacts in the states VERSION_NEEDS allows (409)."""
    for reference, status in version_artifacts(version):
        if target in VERSION_NEEDS and status not in VERSION_NEEDS[target]:
            raise conflict("artifact_not_active" if target == "active" else "artifact_not_canary",
                           f"a {target} version cannot stand on a {status} artifact ({reference})",
                           artifact_reference=reference, artifact_status=status)


def successful_canary_instances(conn, version: dict) -> int:
    """The one definition of a successful canary instance of a version: an instance that is not a smoke instance,
    whose deploy of this version (the version it was created on, as its requested event records) or whose upgrade
    to it succeeded. It is a fact of the past: a later failure, upgrade, decommission or deletion of the instance
    does not take it back out."""
    return conn.execute(
        """SELECT count(DISTINCT i.id) AS n FROM app_instances i JOIN operations o ON o.instance_id = i.id
            WHERE i.app_slug = %(slug)s AND i.smoke_gate_id IS NULL AND o.status = 'succeeded'
              AND ((o.kind = 'upgrade' AND o.params->>'target_version_id' = %(id)s::text)
                   OR (o.kind = 'deploy' AND EXISTS (
                           SELECT 1 FROM instance_events e WHERE e.app_instance_id = i.id
                              AND e.type = 'apps.instance.requested' AND e.payload->>'app_version' = %(version)s)))""",
        {"slug": version["app_slug"], "id": version["id"], "version": version["version"]}).fetchone()["n"]


def check_version_gates(conn, actor: Principal, version: dict, target: str, settings, skip_gates: bool,
                        reason: str) -> list[str]:
    """A move by hand that a gate guards (rules.version_gate, with the operator's promotion settings) is refused
    with 409 gate_required, or canary_instances_short while too few canary instances succeeded. `skip_gates`
    (apps.catalog.gates.skip: platform admins) moves past it, recorded as a gate.skipped event; returns the gates
    skipped."""
    if skip_gates:
        actor.require("apps.catalog.gates.skip")
    gate = version_gate(version["status"], target, smoke=settings.promotion_canary_smoke,
                        canary_instances=settings.promotion_canary_instances)
    if gate is None:
        return []
    if gate == "canary_instances":
        have, need = successful_canary_instances(conn, version), settings.promotion_canary_instances
        if have >= need:
            return []
        refusal = conflict("canary_instances_short", f"version {version['version']} has {have} successful canary "
                           f"instance(s); {need} are needed before it becomes active", have=have, need=need)
    elif gate == "smoke":
        refusal = conflict("gate_required", f"version {version['version']} becomes canary through a passed smoke "
                           "gate (a deploy and a decommission on allocations you name)"
                           + (", and active from canary" if target == "active" else ""), gate="smoke",
                           route=f"POST /v1/catalog/apps/{version['app_slug']}/versions/{version['version']}/gates")
    else:
        refusal = conflict("gate_required", f"version {version['version']} goes through canary before it becomes "
                           f"active ({settings.promotion_canary_instances} successful canary instance(s))",
                           gate="canary", route=f"POST /v1/catalog/apps/{version['app_slug']}/versions/"
                           f"{version['version']}/transitions")
    if not skip_gates:
        raise refusal
    events.append(conn, {"slug": version["app_slug"], "tenant_id": version["app_tenant_id"]}, "gate.skipped",
                  {"gates": [gate], "from": version["status"], "to": target, "reason": reason,
                   "by": {"kind": actor.kind, "id": actor.id, "name": actor.name}},
                  artifact_id=version["artifact_id"], app_version_id=version["id"])
    return [gate]


def transition_version(conn, actor: Principal, slug: str, version: str, target: str, reason: str, *,
                       gates=None, skip_gates: bool = False) -> dict:
    """Move a version (legal moves only, on artifacts in the states it needs). `gates`: the promotion settings a
    move by hand answers to (check_version_gates); None for the moves the platform makes itself (a passed smoke
    gate, an artifact's rollback)."""
    before = get_version(conn, slug, version)
    conn.execute("SELECT 1 FROM app_versions WHERE id = %s FOR UPDATE", (before["id"],))
    # the version's artifacts, its pinned files included, cannot be deprecated between the check and the update
    conn.execute("SELECT 1 FROM artifacts WHERE id IN (%s, %s) OR id IN (SELECT artifact_id FROM version_files "
                 "WHERE version_id = %s) FOR SHARE",
                 (before["artifact_id"], before["workload_artifact_id"], before["id"]))
    before = get_version_by_id(conn, before["id"])
    check_transition(VERSION_TRANSITIONS, "version", before["status"], target)
    check_version_artifacts(before, target)
    skipped = check_version_gates(conn, actor, before, target, gates, skip_gates, reason) if gates else []
    conn.execute("UPDATE app_versions SET status = %s, updated_at = now() WHERE id = %s", (target, before["id"]))
    audit.record(conn, actor, "apps.catalog.version.transition", "app_version", before["id"],
                 before={"status": before["status"]},
                 after={"status": target} | ({"skipped_gates": skipped} if skipped else {}), reason=reason,
                 context=_context(slug, before["app_tenant_id"]))
    return get_version_by_id(conn, before["id"])

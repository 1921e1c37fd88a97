"""The catalog's timeline (catalog_events, migration 0022): every promotion gate's outcome, with the correlation id
of the request or run it came from, so that a publisher follows an artifact from upload to active as a tenant
follows an instance. Payloads never hold secret values."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg

from .. import correlation
from ..audit.service import jsonb


def append(conn: psycopg.Connection, app: dict, event_type: str, payload: dict[str, Any] | None = None, *,
           artifact_id: UUID | None = None, app_version_id: UUID | None = None, gate_id: UUID | None = None,
           correlation_id: str | None = None) -> dict:
    """One event on the timeline of `app` (an app_manifests row, for its slug and tenant)."""
    return conn.execute(
        """INSERT INTO catalog_events (app_slug, tenant_id, artifact_id, app_version_id, gate_id, type, payload,
               correlation_id)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING *""",
        (app["slug"], app["tenant_id"], artifact_id, app_version_id, gate_id, event_type, jsonb(payload or {}),
         correlation_id or correlation.current()),
    ).fetchone()


def list_events(conn: psycopg.Connection, app_slug: str, *, after: int, limit: int, artifact_id: UUID | None = None,
                app_version_id: UUID | None = None, event_type: str | None = None) -> list[dict]:
    """The app's events after id `after`, oldest first, optionally of one artifact, version or type (limit + 1
    rows: the caller pages them)."""
    return conn.execute(
        """SELECT * FROM catalog_events
            WHERE app_slug = %s AND id > %s
              AND (%s::uuid IS NULL OR artifact_id = %s) AND (%s::uuid IS NULL OR app_version_id = %s)
              AND (%s::text IS NULL OR type = %s)
            ORDER BY id LIMIT %s""",
        (app_slug, after, artifact_id, artifact_id, app_version_id, app_version_id, event_type, event_type,
         limit + 1),
    ).fetchall()

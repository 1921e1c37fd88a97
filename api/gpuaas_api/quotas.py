"""Per-project quotas: how many of a thing one project may hold at once. A refusal is a 429
`quota_exceeded` that names the quota and its limit, so a client can tell it from a state conflict."""

from __future__ import annotations

from uuid import UUID

import psycopg

from .errors import ApiError

_COUNTS = {
    "open_operations": "SELECT count(*) AS n FROM operations WHERE project_id = %s AND status IN ('queued', 'running')",
    "instances": "SELECT count(*) AS n FROM app_instances WHERE project_id = %s AND deleted_at IS NULL",
}


def enforce(conn: psycopg.Connection, project_id: UUID, quota: str, limit: int) -> None:
    """Refuse one more `quota` thing once the project holds `limit` of them (0: no limit). The
    transaction-scoped advisory lock serializes the project's concurrent requests, so two of them
    cannot both take the last unit."""
    if limit <= 0:
        return
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"quota:{quota}:{project_id}",))
    held = conn.execute(_COUNTS[quota], (project_id,)).fetchone()["n"]  # noqa: S608 - constant SQL
    if held >= limit:
        raise ApiError(429, "quota_exceeded", f"the project holds {held} {quota.replace('_', ' ')}; its quota is "
                       f"{limit}", {"quota": quota, "limit": limit, "current": held})

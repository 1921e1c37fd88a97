from __future__ import annotations

from uuid import UUID

import psycopg

from ..errors import not_found


def get_allocation(conn: psycopg.Connection, allocation_id: UUID) -> dict:
    row = conn.execute("SELECT * FROM allocations WHERE id = %s", (allocation_id,)).fetchone()
    if row is None:
        raise not_found("allocation", allocation_id)
    return row


def get_allocations(conn: psycopg.Connection, ids: list[UUID]) -> dict[UUID, dict]:
    rows = conn.execute("SELECT * FROM allocations WHERE id = ANY(%s)", (ids,)).fetchall()
    return {r["id"]: r for r in rows}


def live_member_count(conn: psycopg.Connection, allocation_id: UUID) -> int:
    return conn.execute(
        "SELECT count(*) AS n FROM app_instance_members WHERE allocation_id = %s AND status <> 'removed'",
        (allocation_id,),
    ).fetchone()["n"]

"""Allocations and the hosts they carry. A host is known by its address and SSH port: one tenant
registers it, and it serves the live members of one instance (or of several instances whose app
versions all declare `shares_hosts`)."""

from __future__ import annotations

from uuid import UUID

import psycopg

from ..errors import not_found

# Placement and registration decide on a snapshot of every live binding; one transaction-scoped
# advisory lock serializes those decisions, so two concurrent requests cannot both take one host.
HOSTS_LOCK_KEY = 0x686F7374

# Every host of every unreleased allocation, with its address key.
_HOSTS = """
SELECT al.id AS allocation_id, al.tenant_id, h->>'name' AS host_name, lower(h->>'address') AS address,
       coalesce((h->>'ssh_port')::int, 22) AS port
  FROM allocations al CROSS JOIN LATERAL jsonb_array_elements(al.hosts) h
"""


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


def host_key(host: dict) -> str:
    return f"{host['address'].lower()}:{host.get('ssh_port', 22)}"


def lock_hosts(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (HOSTS_LOCK_KEY,))


def registered_elsewhere(conn: psycopg.Connection, tenant_id: UUID, hosts: list[dict]) -> list[str]:
    """address:port keys among `hosts` that an unreleased allocation of another tenant holds."""
    rows = conn.execute(
        f"""SELECT DISTINCT x.address || ':' || x.port AS key FROM ({_HOSTS} WHERE al.released_at IS NULL) x
             WHERE x.tenant_id <> %s AND x.address || ':' || x.port = ANY(%s) ORDER BY 1""",  # noqa: S608 - constant
        (tenant_id, [host_key(h) for h in hosts])).fetchall()
    return [r["key"] for r in rows]


def busy_hosts(conn: psycopg.Connection, allocation_ids: list[UUID], *, instance_id: UUID | None,
               shares_hosts: bool) -> set[tuple[UUID, str]]:
    """(allocation_id, host_name) of the given allocations whose address a live member of another
    instance holds, unless both that instance's version and ours share hosts. Call lock_hosts first."""
    rows = conn.execute(
        f"""WITH bound AS (
                SELECT DISTINCT x.address, x.port FROM app_instance_members m
                  JOIN app_instances i ON i.id = m.instance_id
                  JOIN app_versions v ON v.id = i.app_version_id
                  JOIN ({_HOSTS}) x ON x.allocation_id = m.allocation_id AND x.host_name = m.host_name
                 WHERE m.status <> 'removed' AND m.instance_id IS DISTINCT FROM %(self)s
                   AND NOT (%(shares)s AND coalesce((v.compatibility->>'shares_hosts')::boolean, false)))
            SELECT x.allocation_id, x.host_name FROM ({_HOSTS}) x JOIN bound b USING (address, port)
             WHERE x.allocation_id = ANY(%(ids)s)""",  # noqa: S608 - constant SQL
        {"self": instance_id, "shares": shares_hosts, "ids": allocation_ids}).fetchall()
    return {(r["allocation_id"], r["host_name"]) for r in rows}

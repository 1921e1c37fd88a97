"""Allocations and the hosts they carry. A host is known by the IP addresses its address reaches
(resolved at registration, stored in `host_addresses`) and its SSH port: one tenant registers it, and
it serves the live members of one instance (or of several instances whose app versions all declare
`shares_hosts`)."""

from __future__ import annotations

from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from ..errors import not_found, unprocessable
from .addresses import legacy_ipv4, resolve

# Placement and registration decide on a snapshot of every live binding; one transaction-scoped
# advisory lock serializes those decisions, so two concurrent requests cannot both take one host.
HOSTS_LOCK_KEY = 0x686F7374

# Every host of every allocation, one row per address it reaches (lock_hosts fills in older rows).
_HOSTS = """
SELECT al.id AS allocation_id, al.tenant_id, h->>'name' AS host_name, a.address,
       coalesce((h->>'ssh_port')::int, 22) AS port
  FROM allocations al CROSS JOIN LATERAL jsonb_array_elements(al.hosts) h
       CROSS JOIN LATERAL jsonb_array_elements_text(al.host_addresses -> (h->>'name')) a(address)
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


def host_addresses(hosts: list[dict]) -> dict[str, list[str]]:
    """{host name: the addresses it reaches} for a registration, stored with the allocation. A legacy
    IPv4 spelling, a name that does not resolve, or two hosts reaching one address on one SSH port is a
    422 naming the host. Resolve before lock_hosts: a name may wait on the resolver."""
    found: dict[str, list[str]] = {}
    owner: dict[tuple[str, int], str] = {}
    problems: list[tuple[int, str]] = []
    for i, host in enumerate(hosts):
        if legacy_ipv4(host["address"]):
            problems.append((i, f"{host['address']} is a legacy IPv4 spelling: write it in dotted decimal "
                                "without leading zeros (e.g. 10.0.0.1)"))
            continue
        try:
            found[host["name"]] = resolve(host["address"])
        except (OSError, UnicodeError):
            problems.append((i, f"{host['address']} does not resolve"))
            continue
        for address in found[host["name"]]:
            first = owner.setdefault((address, host["ssh_port"]), host["name"])
            if first != host["name"]:
                problems.append((i, f"{host['address']} reaches {address}, as host {first} does: one host "
                                    "(address with its SSH port) appears once in an allocation"))
                break
    if problems:
        raise unprocessable("validation_error", "; ".join(m for _, m in problems), errors=[
            {"loc": ["body", "hosts", str(i), "address"], "msg": m, "type": "value_error"} for i, m in problems])
    return found


def _stored_addresses(hosts: list[dict]) -> dict[str, list[str]]:
    """host_addresses for a row registered before they were stored. Its spellings passed older checks:
    legacy IPv4 resolves as ssh reads it, and a name that no longer resolves keeps its spelling, which
    still matches the same spelling elsewhere, as it did before."""
    found = {}
    for host in hosts:
        try:
            found[host["name"]] = resolve(host["address"])
        except (OSError, UnicodeError):
            found[host["name"]] = [host["address"].lower()]
    return found


def lock_hosts(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (HOSTS_LOCK_KEY,))
    # Allocations registered before migration 0012 get their addresses here, once, under the lock and
    # before any decision reads them: names resolve only here, not in SQL.
    stale = conn.execute("SELECT id, hosts FROM allocations WHERE host_addresses IS NULL AND released_at IS NULL")
    for row in stale.fetchall():
        conn.execute("UPDATE allocations SET host_addresses = %s WHERE id = %s",
                     (Jsonb(_stored_addresses(row["hosts"])), row["id"]))


def registered_elsewhere(conn: psycopg.Connection, tenant_id: UUID, hosts: list[dict],
                         addresses: dict[str, list[str]]) -> list[str]:
    """address:port (canonical) that `hosts`, reaching `addresses`, share with an unreleased allocation
    of another tenant. Call lock_hosts first."""
    wanted = [(a, h["ssh_port"]) for h in hosts for a in addresses[h["name"]]]
    rows = conn.execute(
        f"""SELECT DISTINCT x.address, x.port FROM ({_HOSTS} WHERE al.released_at IS NULL) x
             WHERE x.tenant_id <> %s AND (x.address, x.port) IN (SELECT * FROM unnest(%s::text[], %s::int[]))
             ORDER BY 1, 2""",  # noqa: S608 - constant SQL
        (tenant_id, [a for a, _ in wanted], [p for _, p in wanted])).fetchall()
    return [f"[{r['address']}]:{r['port']}" if ":" in r["address"] else f"{r['address']}:{r['port']}" for r in rows]


def busy_hosts(conn: psycopg.Connection, allocation_ids: list[UUID], *, instance_id: UUID | None,
               shares_hosts: bool) -> set[tuple[UUID, str]]:
    """(allocation_id, host_name) of the given allocations whose address a live member of another
    instance holds, unless both that instance's version and ours share hosts, or whose host waits for
    the cleanup of a member removed while it was unreachable (that cleanup would tear down whatever a
    new member set up there). Call lock_hosts first."""
    rows = conn.execute(
        f"""WITH bound AS (
                SELECT DISTINCT x.address, x.port FROM app_instance_members m
                  JOIN app_instances i ON i.id = m.instance_id
                  JOIN app_versions v ON v.id = i.app_version_id
                  JOIN ({_HOSTS}) x ON x.allocation_id = m.allocation_id AND x.host_name = m.host_name
                 WHERE m.status <> 'removed' AND m.instance_id IS DISTINCT FROM %(self)s
                   AND NOT (%(shares)s AND coalesce((v.compatibility->>'shares_hosts')::boolean, false))
                UNION
                SELECT x.address, x.port FROM host_cleanups c
                  JOIN ({_HOSTS}) x ON x.allocation_id = c.allocation_id AND x.host_name = c.host_name
                 WHERE c.status = 'pending')
            SELECT x.allocation_id, x.host_name FROM ({_HOSTS}) x JOIN bound b USING (address, port)
             WHERE x.allocation_id = ANY(%(ids)s)""",  # noqa: S608 - constant SQL
        {"self": instance_id, "shares": shares_hosts, "ids": allocation_ids}).fetchall()
    return {(r["allocation_id"], r["host_name"]) for r in rows}

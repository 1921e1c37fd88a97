"""The service's database connections give up on a lost host in seconds (issue 28: failover within 30 s):
the network timeouts every pooled connection carries, read back from a real libpq connection."""

from __future__ import annotations

from gpuaas_api import db as dbmod
from psycopg.conninfo import make_conninfo


def options(database: dbmod.Database) -> dict[str, str]:
    with database.transaction() as conn:
        return {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}


def test_pooled_connections_carry_the_network_timeouts_and_the_urls_own_values_win(pg_uri):
    database = dbmod.Database(make_conninfo(pg_uri, connect_timeout=3), min_size=1, max_size=1)
    database.open()
    try:
        got = options(database)
    finally:
        database.close()
    assert got["connect_timeout"] == "3"  # the URL's own
    for key in ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout"):
        assert got[key] == dbmod.NETWORK_TIMEOUTS[key], key

"""Database access: connection pool, the embedded PostgreSQL (gpuaas_api.embedded_db), forward-only migrations.

Everything is synchronous psycopg 3 with plain SQL. A `with db.transaction() as conn:` block is one
transaction (commit on success, rollback on error), so service functions take a connection and can
be composed inside one transaction by HTTP handlers and by worker processes alike.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from .config import Settings
from .embedded_db import EmbeddedPostgres

log = logging.getLogger(__name__)
T = TypeVar("T")

MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Any constant works; it only has to be the same for every process that migrates this database.
MIGRATION_LOCK_KEY = 0x67707561


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    found = []
    for entry in resources.files("gpuaas_api.migrations").iterdir():
        match = MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions: {versions}")
    return found


def upgrade(conninfo: str) -> list[int]:
    """Apply pending migrations in order; returns the versions applied. Safe to run concurrently."""
    applied_now: list[int] = []
    with psycopg.connect(with_network_timeouts(conninfo), autocommit=True) as conn:
        # Under the lock too: CREATE TABLE IF NOT EXISTS is not safe against a concurrent CREATE (two
        # replicas starting at once on a new database).
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
        for migration in available_migrations():
            with conn.transaction():
                # Serialize migrators (serve, db upgrade, workers) on one advisory lock.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
                done = conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = %s", (migration.version,)
                ).fetchone()
                if done:
                    continue
                log.info("applying migration %04d_%s", migration.version, migration.name)
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied_now.append(migration.version)
    return applied_now


def pending_migrations(conn: psycopg.Connection) -> list[int]:
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL AS ok").fetchone()
    if not _first(exists):
        return [m.version for m in available_migrations()]
    done = {_first(r) for r in conn.execute("SELECT version FROM schema_migrations").fetchall()}
    return [m.version for m in available_migrations() if m.version not in done]


def _first(row):
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def embedded_server_uri(data_dir: Path) -> str:
    """Start (or attach to) the embedded PostgreSQL in data_dir and return its URI; a server this starts
    stops when this process exits."""
    return EmbeddedPostgres(data_dir).start()


def embedded_server(settings: Settings) -> EmbeddedPostgres:
    """The embedded PostgreSQL for `settings` (not started): see gpuaas_api.embedded_db."""
    return EmbeddedPostgres(settings.data_dir, getattr(settings, "postgres_bin_dir", None))


def resolve_database_url(settings: Settings) -> str:
    """DATABASE_URL, or the URI of the embedded server (started, or attached to when it runs). A server
    this call starts belongs to this process: it stops when the process exits, or dies."""
    return settings.database_url or embedded_server(settings).start()


@contextmanager
def database_url(settings: Settings) -> Iterator[str]:
    """resolve_database_url for a command's lifetime: a server it started is stopped when the block ends."""
    if settings.database_url:
        yield settings.database_url
        return
    server = embedded_server(settings)
    try:
        yield server.start()
    finally:
        server.stop()


# A database host that is gone (a failover, a network cut) is given up in seconds, not when TCP gives up
# (minutes): connects time out, idle connections are probed, and unacknowledged writes fail after 10 s.
# The connection string's own values win; libpq ignores the TCP ones on a Unix socket (the embedded server).
NETWORK_TIMEOUTS = {"connect_timeout": "5", "keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "2",
                    "keepalives_count": "3", "tcp_user_timeout": "10000"}


def with_network_timeouts(conninfo: str) -> str:
    """`conninfo` with NETWORK_TIMEOUTS for what it does not set."""
    given = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: v for k, v in NETWORK_TIMEOUTS.items() if k not in given})


class Database:
    """A connection pool that outlives database restarts: every checkout is checked, and `timeout`
    bounds both a caller's wait for a connection (then psycopg_pool.PoolTimeout, an OperationalError:
    503 in the API, a retry in workers) and the pool's background reconnect attempts, so that once
    the server is back the next request opens a fresh connection instead of waiting out a backoff."""

    def __init__(self, conninfo: str, *, min_size: int = 2, max_size: int = 10, timeout: float = 5.0):
        self.conninfo = with_network_timeouts(conninfo)
        self.pool = ConnectionPool(
            self.conninfo,
            min_size=min_size,
            max_size=max_size,
            kwargs={"row_factory": dict_row},
            open=False,
            name="gpuaas",
            check=self._check,
            timeout=timeout,
            reconnect_timeout=timeout,
        )

    def _check(self, conn: psycopg.Connection) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            # One broken connection means the server went away: its idle siblings are broken too.
            # Replace them all now, not one per request (each failed check costs the caller a backoff).
            log.warning("database connection lost; replacing the pool's idle connections")
            self.pool.check()
            raise

    def open(self) -> None:
        self.pool.open(wait=True, timeout=30)

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def transaction(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        """One transaction: committed when the block ends normally, rolled back on exception.
        `timeout` overrides the pool's wait for a connection."""
        with self.pool.connection(timeout=timeout) as conn:
            yield conn


def retrying(db: Database, what: str, work: Callable[[psycopg.Connection], T],
             stop: threading.Event | None = None) -> T:
    """work(conn) in one transaction, run again while the database is unreachable (a restart must not
    fail a run) until it commits; re-raises once `stop` is set. Only for work that is safe to
    repeat: a rolled-back attempt left nothing behind."""
    delay = 0.2
    while True:
        try:
            with db.transaction() as conn:
                return work(conn)
        except psycopg.OperationalError as exc:
            if stop is not None and stop.is_set():
                raise
            log.warning("%s: database unavailable (%s); retrying in %.1f s", what, type(exc).__name__, delay)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

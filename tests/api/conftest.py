"""Real PostgreSQL for the API tests: one embedded server (the service's own, gpuaas_api.embedded_db) per
test session, one migrated template database, and a fresh database cloned from the template for every
test (~0.1 s)."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from gpuaas_api import db as dbmod
from gpuaas_api.app import create_app
from psycopg.conninfo import make_conninfo

from .world import World, build_world

TEMPLATE = "gpuaas_template"
_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_uri():
    from gpuaas_api.embedded_db import EmbeddedPostgres

    # Not under pytest's tmp_path: concurrent pytest runs on this machine rotate /tmp/pytest-of-<user>
    # and would delete a live data directory.
    datadir = Path(tempfile.mkdtemp(prefix="gpuaas-api-tests-"))
    server = EmbeddedPostgres(datadir / "pg")
    try:
        uri = server.start()
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        dbmod.upgrade(make_conninfo(uri, dbname=TEMPLATE))
        yield uri
    finally:
        server.stop()
        shutil.rmtree(datadir, ignore_errors=True)


@contextmanager
def fresh_database(pg_uri: str):
    """A new database cloned from the migrated template; dropped afterwards."""
    name = f"t_{next(_counter)}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    try:
        yield make_conninfo(pg_uri, dbname=name)
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def db_url(pg_uri):
    with fresh_database(pg_uri) as url:
        yield url


@pytest.fixture
def database(db_url):
    database = dbmod.Database(db_url, min_size=1, max_size=4)
    database.open()
    yield database
    database.close()


@pytest.fixture
def app(database):
    return create_app(database)


@pytest.fixture
def client(app):
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def world(client, database) -> World:
    return build_world(client, database)


@dataclass
class Shared:
    """One world for a whole test module (matrix and schemathesis runs), on its own database."""
    world: World
    database: dbmod.Database
    app: object


@pytest.fixture(scope="module")
def shared(pg_uri):
    with fresh_database(pg_uri) as url:
        database = dbmod.Database(url, min_size=1, max_size=4)
        database.open()
        app = create_app(database)
        try:
            with TestClient(app, raise_server_exceptions=False) as client:
                yield Shared(build_world(client, database), database, app)
        finally:
            database.close()

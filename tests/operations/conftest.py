"""Fixtures for the operations tests: the API tests' embedded PostgreSQL and world (reused from
tests/api), the test app (a collection of its own under tests/apps/opsapp, registered through the
API like any app, so every run executes its build by digest), and in-process workers.

Every run here is a real ansible-runner process running a real playbook on localhost; only the
Slurm cluster is absent (the lead's end-to-end test covers real hosts)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from api.world import World, build_world, register_allocation
from cryptography.fernet import Fernet
from gpuaas_api import db as dbmod
from gpuaas_api.app import create_app
from gpuaas_api.config import DEFAULT_OPERATION_TIMEOUTS, OperationSettings
from gpuaas_api.executor.worker import Worker

from api import conftest as api_fixtures

from .helpers import TEST_APP, publish_test_app, use_local_connection

# The API tests' fixtures, reused: embedded PostgreSQL, per-test database clone, client.
pg_uri, db_url, database, client = api_fixtures.pg_uri, api_fixtures.db_url, api_fixtures.database, api_fixtures.client


@pytest.fixture
def op_settings(tmp_path) -> OperationSettings:
    return OperationSettings(state_dir=tmp_path / "state",
                             ssh_private_key_file=None, ssh_host_key_checking=False,
                             secret_key=Fernet.generate_key().decode(), lease_seconds=3, max_attempts=2,
                             poll_seconds=0.2, timeouts=dict(DEFAULT_OPERATION_TIMEOUTS),
                             # statuses follow the runs alone here; the health check has tests of its own
                             health_concurrency=0)


@pytest.fixture
def app(database, op_settings):
    app = create_app(database)
    app.state.operation_settings = op_settings
    return app


@dataclass
class Ops:
    w: World
    database: dbmod.Database
    db_url: str
    settings: OperationSettings
    marker_root: Path
    workers: list

    @property
    def ids(self):
        return self.w.ids

    def sql(self, query: str, params=()):
        with self.database.transaction() as conn:
            return conn.execute(query, params).fetchall()

    def start_worker(self, concurrency: int = 1, name: str | None = None) -> Worker:
        pool = dbmod.Database(self.db_url, min_size=1, max_size=2 + 3 * concurrency)
        pool.open()
        worker = Worker(pool, self.settings, name=name, concurrency=concurrency)
        worker.start()
        self.workers.append((worker, pool))
        return worker


@pytest.fixture
def ops(client, database, db_url, op_settings, tmp_path):
    w = build_world(client, database)
    publish_test_app(w)
    w.call("platform_admin", "POST", f"/v1/projects/{w.ids['project_a1']}/entitlements", 201,
           json={"app_slug": TEST_APP})
    w.ids["alloc_ops"] = register_allocation(w, "project_a1", "alloc-ops", hosts=4)["id"]
    w.ids["alloc_ops2"] = register_allocation(w, "project_a1", "alloc-ops2", hosts=4)["id"]
    state = Ops(w, database, db_url, op_settings, tmp_path / "markers", [])
    state.marker_root.mkdir()
    yield state
    for worker, _ in state.workers:
        worker.stop.set()
    for worker, database_ in state.workers:
        worker_threads_done(worker)
        database_.close()


def worker_threads_done(worker: Worker, timeout: float = 30) -> None:
    import threading
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(t.name.startswith("worker-") and t.is_alive() for t in threading.enumerate()):
            return
        time.sleep(0.1)


@pytest.fixture(autouse=True)
def _no_stray_env():
    # Workers started in subprocesses read these; make sure a developer's shell does not leak in.
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("GPUAAS_")}
    yield
    os.environ.update(saved)


@pytest.fixture
def local_hosts(monkeypatch):
    """No SSH here: a status read-back or a credential's read reaches the test hosts with a local connection."""
    use_local_connection(monkeypatch)

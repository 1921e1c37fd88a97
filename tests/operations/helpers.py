"""Helpers for the operations tests: the test app and small waits."""

from __future__ import annotations

import contextlib
import functools
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import uvicorn
import yaml
from api.world import World
from fastapi.testclient import TestClient
from gpuaas_api.catalog.register import build, register

# The test app is a collection of its own under tests/apps (its descriptor, playbook and status
# module): the second adapter, registered through the API like any app.
OPSAPP = Path(__file__).resolve().parents[1] / "apps" / "opsapp"
DESCRIPTOR = yaml.safe_load((OPSAPP / "adapters" / "opsapp.yml").read_text())
TEST_APP = DESCRIPTOR["app"]["slug"]
KINDS = list(DESCRIPTOR["actions"])
PARAMETERS = DESCRIPTOR["parameters"]
CREDENTIAL = next(iter(DESCRIPTOR["credentials"]))  # its one credential, read from a worker's host
_BUILDS = Path(tempfile.mkdtemp(prefix="gpuaas-opsapp-builds-"))


@functools.cache
def opsapp_build(version: str) -> Path:
    """The test app's collection built as `version` (its descriptor and collection versions set)."""
    source = _BUILDS / f"src-{version}"
    shutil.copytree(OPSAPP, source)
    descriptor = dict(DESCRIPTOR, version=version, vars=DESCRIPTOR["vars"] | {"app_version": version})
    (source / "adapters" / "opsapp.yml").write_text(yaml.safe_dump(descriptor))
    galaxy = yaml.safe_load((source / "galaxy.yml").read_text()) | {"version": version}
    (source / "galaxy.yml").write_text(yaml.safe_dump(galaxy))
    return build(source, Path(tempfile.mkdtemp(dir=_BUILDS)))


def publish_test_app(w: World, version: str = "1.0.0") -> dict:
    """Registers the test app's build of `version` as the platform admin (`gpuaas apps register`)."""
    admin = TestClient(w.client.app, headers=w.headers("platform_admin"))
    (registered,) = register(admin, opsapp_build(version), activate=True, reason="tests", skip_gates=True)
    return w.call("platform_admin", "GET", f"/v1/catalog/apps/{TEST_APP}/versions/{registered.version}", 200).json()


def make_instance(ops, name: str, *, workers: int = 2, allocation: str = "alloc_ops", actor: str = "service_account",
                  **parameters) -> tuple[dict, Path]:
    marker = ops.marker_root / name
    marker.mkdir()
    body = {"name": name, "app_slug": TEST_APP, "allocation_ids": [ops.ids[allocation]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": workers}],
            "parameters": {"marker_dir": str(marker)} | parameters}
    instance = ops.w.call(actor, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 201, json=body).json()
    return instance, marker


def use_local_connection(monkeypatch) -> None:
    """No SSH in these tests: runs reach the test hosts with a local connection. (The catalog and the planner
    refuse ansible_* variables, so this is set where no tenant can reach.)"""
    from gpuaas_api.executor import plan as planner

    build_inventory = planner._inventory

    def local_inventory(*args):
        inventory = build_inventory(*args)
        for hostvars in inventory["all"]["hosts"].values():
            hostvars |= {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        return inventory

    monkeypatch.setattr(planner, "_inventory", local_inventory)


def point_credential(ops_sql: Callable, version_id: str, directory: Path) -> None:
    """The test app's credential module reads `<directory>/<node name>.secret` on each host (a template the run
    renders per host), where the tests write the secret; the catalog's path is a placeholder."""
    ops_sql("""UPDATE app_versions SET adapter = jsonb_set(adapter, ARRAY['credentials', %s, 'options', 'path'],
                                                        to_jsonb(%s::text))
                WHERE id = %s RETURNING id""",
            (CREDENTIAL, str(directory / "{{ inventory_hostname }}.secret"), version_id))


def deployed_with_credential(ops, name: str) -> tuple[str, list[str], Path]:
    """A running instance of the test app (deployed by a worker), its workers' node names, and the directory its
    credential module reads `<node name>.secret` from."""
    instance, marker = make_instance(ops, name)
    worker = ops.start_worker()
    op = wait_op(ops, ops.w.call("service_account", "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()["id"])
    assert op["status"] == "succeeded", op
    worker.stop.set()
    point_credential(ops.sql, instance["app_version_id"], marker)
    return instance["id"], sorted(m["node_name"] for m in members(ops, instance["id"]) if m["role"] == "worker"), marker


def wait_for(predicate: Callable[[], object], timeout: float = 60, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_op(ops, op_id: str, statuses=("succeeded", "failed", "canceled"), timeout: float = 90) -> dict:
    def done():
        op = ops.w.call("service_account", "GET", f"/v1/operations/{op_id}", 200).json()
        return op if op["status"] in statuses else None
    return wait_for(done, timeout, 0.2, f"operation {op_id} to reach {statuses}")


def events(ops, instance_id: str, **params) -> list[dict]:
    out, cursor = [], None
    while True:
        q = dict(params, limit=500) | ({"cursor": cursor} if cursor else {})
        page = ops.w.call("service_account", "GET", f"/v1/instances/{instance_id}/events", 200, params=q).json()
        out += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            return out


def members(ops, instance_id: str) -> list[dict]:
    return ops.w.call("service_account", "GET", f"/v1/instances/{instance_id}/members", 200).json()["items"]


def instance_secrets(ops, instance_id: str) -> dict[str, str]:
    from gpuaas_api.secrets import service as secrets

    with ops.database.transaction() as conn:
        return secrets.load(conn, ops.settings, instance_id)


def running_with_scheduler_key(ops, instance_id: str) -> str:
    """Marks the instance running with its members active (no run: the tests that use it drive its toy scheduler,
    not its hosts) and returns its scheduler key, made as a deploy makes it. `ops`: anything with sql, database and
    settings (the operations world, the authorization matrix's context)."""
    from gpuaas_api.secrets import service as secrets

    ops.sql("UPDATE app_instances SET status = 'running' WHERE id = %s RETURNING id", (instance_id,))
    ops.sql("UPDATE app_instance_members SET status = 'active' WHERE instance_id = %s RETURNING id", (instance_id,))
    with ops.database.transaction() as conn:
        secrets.ensure(conn, ops.settings, instance_id, {"scheduler_key": {"kind": "token", "size": 32}})
        return secrets.load(conn, ops.settings, instance_id)["scheduler_key"]


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """The app over real HTTP on a free loopback port (uvicorn in a thread); yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, what="uvicorn")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)

"""Helpers for the operations tests: the test app and small waits."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from api.world import DIGEST, World

TEST_APP = "opsapp"
ROLES = [{"name": "controller", "min": 1, "max": 1}, {"name": "worker", "min": 1, "max": 8}]
KINDS = ["deploy", "member_add", "member_drain", "member_resume", "member_remove", "member_replace",
         "reconfigure", "upgrade", "rollback", "decommission"]
# What a tenant may set on the test app (everything else is refused with a 422).
PARAMETERS = {"type": "object", "additionalProperties": False, "properties": {
    "marker_dir": {"type": "string", "minLength": 1, "maxLength": 500, "description": "where the playbook records"},
    "fail_step": {"enum": KINDS, "description": "fail this step on purpose"},
    "leak_secret": {"type": "boolean"},
    "round": {"type": "integer", "minimum": 0, "maximum": 1000},
    "message": {"type": "string", "maxLength": 2000, "description": "free text the playbook writes down"},
    "labels": {"type": "object", "maxProperties": 16, "additionalProperties": {"type": "string"},
               "description": "free-form key=value pairs the playbook writes down"},
}}
COMPAT = {"requires_capacity_shape": ["baremetal"], "min_gpu_count": 1, "requires_exclusive_node": False,
          "multi_node": True}


def profile(version: str) -> dict:
    """Everything adapter-specific lives here, as it would for Slurm (see docs/operations.md)."""
    return {
        "extra_vars": {"app_version": version},
        "ansible": {
            "groups": {"controller": ["test_controller"], "worker": ["test_workers"]},
            "operation_vars": {"members": "test_members", "old": "test_old", "new": "test_new"},
            "action_vars": {k: {"step": k} for k in KINDS},
            "secrets": {"munge_key": {"random_bytes": 96}},
            "status": {"module": "gpuaas.apps.fake_nodes", "module_args": "path={{ marker_dir }}/nodes.json",
                       "role": "controller", "node_roles": ["worker"],
                       "rules": [{"all": ["DOWN"], "status": "failed"},
                                 {"all": ["DRAIN", "IDLE"], "status": "drained"},
                                 {"all": ["DRAIN"], "status": "draining"},
                                 {"all": ["IDLE"], "status": "active"}, {"all": ["MIXED"], "status": "active"},
                                 {"all": ["ALLOCATED"], "status": "active"}]},
        },
    }


def publish_test_app(w: World, version: str = "1.0.0") -> dict:
    pa = "platform_admin"
    if w.client.get(f"/v1/catalog/apps/{TEST_APP}", headers=w.headers(pa)).status_code == 404:
        w.call(pa, "POST", "/v1/catalog/apps", 201, json={"slug": TEST_APP, "display_name": "Ops test app",
                                                          "runtime_backend": "bare_metal"})
    artifact = w.call(pa, "POST", f"/v1/catalog/apps/{TEST_APP}/artifacts", 201, json={
        "kind": "controller", "reference": f"registry.example.com/gpuaas/{TEST_APP}:{version}@{DIGEST}"}).json()
    for target in ("staged", "canary", "active"):
        w.call(pa, "POST", f"/v1/catalog/artifacts/{artifact['id']}/transitions", 200,
               json={"to": target, "reason": "tests"})
    w.call(pa, "POST", f"/v1/catalog/apps/{TEST_APP}/versions", 201, json={
        "version": version, "artifact_id": artifact["id"], "compatibility": COMPAT, "runtime_profile": profile(version),
        "adapter": {"roles": ROLES, "actions": {k: "gpuaas.apps.step" for k in KINDS}, "parameters": PARAMETERS}})
    return w.call(pa, "POST", f"/v1/catalog/apps/{TEST_APP}/versions/{version}/transitions", 200,
                  json={"to": "active", "reason": "publish"}).json()


def make_instance(ops, name: str, *, workers: int = 2, allocation: str = "alloc_ops", actor: str = "service_account",
                  **parameters) -> tuple[dict, Path]:
    marker = ops.marker_root / name
    marker.mkdir()
    body = {"name": name, "app_slug": TEST_APP, "allocation_ids": [ops.ids[allocation]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": workers}],
            "parameters": {"marker_dir": str(marker)} | parameters}
    instance = ops.w.call(actor, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 201, json=body).json()
    return instance, marker


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

"""The collection's inventory plugin (`gpuaas.apps.gpuaas`) against the real control service over HTTP
(uvicorn on loopback, real PostgreSQL): what operators and AWX get is the inventory the service runs
its own playbooks with, across pages of instances; a token without access gets a clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from operations.helpers import serving

from .world import create_instance, register_allocation

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = str(Path(sys.executable).parent / "ansible-inventory")


@pytest.fixture
def served(app):
    with serving(app) as url:
        yield url


def plain(value):
    """ansible-inventory marks strings read from outside as unsafe ({"__ansible_unsafe": s}): compare values."""
    if isinstance(value, dict) and set(value) == {"__ansible_unsafe"}:
        return value["__ansible_unsafe"]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return [plain(v) for v in value] if isinstance(value, list) else value


def inventory(tmp_path, url: str, token: str, name: str = "a1.gpuaas.yml", **options):
    config = {"plugin": "gpuaas.apps.gpuaas", "url": url} | options
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    env = dict(os.environ, GPUAAS_TOKEN=token, ANSIBLE_INVENTORY_UNPARSED_FAILED="true",
               ANSIBLE_INVENTORY_ENABLED="gpuaas.apps.gpuaas",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"))
    done = subprocess.run([INVENTORY, "-i", str(path), "--list"], capture_output=True, text=True, env=env,
                          timeout=120)
    return done.returncode, (plain(json.loads(done.stdout)) if done.returncode == 0 else None), done.stderr


def test_the_plugin_yields_the_inventory_the_service_runs_with(world, served, tmp_path):
    project = world.ids["project_a1"]
    world.ids["alloc_inv"] = register_allocation(world, "project_a1", "alloc-inv", hosts=24)["id"]
    names = [create_instance(world, "project_admin", "project_a1", f"inv-{n}", "alloc_inv", workers=1)["name"]
             for n in range(12)]
    token = world.tokens["service_account"]

    rc, got, err = inventory(tmp_path, served, token, project_id=project, instances=["inv-3"],
                             keyed_groups=[{"key": "gpuaas_members | map(attribute='role') | first",
                                            "prefix": "role"}])
    assert rc == 0, err
    instance = next(i for i in world.call("service_account", "GET", f"/v1/projects/{project}/instances?limit=200",
                                          200).json()["items"] if i["name"] == "inv-3")
    served_inventory = world.call("service_account", "GET", f"/v1/instances/{instance['id']}/inventory", 200).json()
    hosts = served_inventory["all"]["hosts"]
    assert len(hosts) == 2
    # Each host: its own variables, and the run's (the catalog's pinned packages), which the plugin puts on `all`.
    run_vars = served_inventory["all"]["vars"]
    assert run_vars["slurm_package_version"] and run_vars["munge_package_version"], run_vars
    site_vars = served_inventory["site_vars"]
    assert got["_meta"]["hostvars"] == {h: site_vars | run_vars | v | {"gpuaas_instance_name": "inv-3"}
                                        for h, v in hosts.items()}
    for group, members in served_inventory["all"]["children"].items():
        assert sorted(got[group]["hosts"]) == sorted(members["hosts"]), group
    assert sorted(got["gpuaas_inv_3"]["hosts"]) == sorted(hosts)
    assert sorted(got["role_controller"]["hosts"] + got["role_worker"]["hosts"]) == sorted(hosts)

    # Every instance of the project, read three instances per page.
    rc, every, err = inventory(tmp_path, served, token, name="all.gpuaas.yml", project_id=project, page_size=3)
    assert rc == 0, err
    listed = world.call("service_account", "GET", f"/v1/projects/{project}/instances?limit=200", 200).json()["items"]
    assert {g for g in every if g.startswith("gpuaas_")} == {f"gpuaas_{i['name']}".replace("-", "_") for i in listed}
    assert set(names) <= {i["name"] for i in listed} and len(listed) > 3 * 4

    # Tokens that may not read the project's instances: refused, and the plugin says why. Another
    # project's service account cannot even see the project; the platform admin sees it, but reading a
    # tenant's instances is not among its permissions.
    for actor, answer in (("other_service_account", f"404: project {project} not found (not_found"),
                          ("platform_admin", "403: ")):
        rc, _, err = inventory(tmp_path, served, world.tokens[actor], name="denied.gpuaas.yml", project_id=project)
        assert rc != 0 and f"GET /v1/projects/{project}/instances answered {answer}" in err, (actor, err)
    rc, _, err = inventory(tmp_path, served, token, name="missing.gpuaas.yml", project_id=project,
                           instances=["nope"])
    assert rc != 0 and "no instance nope in project" in err, err


def test_the_plugin_caches_what_it_read(world, served, tmp_path):
    options = {"project_id": world.ids["project_a1"], "cache": True, "cache_plugin": "ansible.builtin.jsonfile",
               "cache_connection": str(tmp_path / "cache"), "cache_timeout": 600}
    rc, first, err = inventory(tmp_path, served, world.tokens["service_account"], **options)
    assert rc == 0, err
    rc, again, err = inventory(tmp_path, served, "not-a-token", **options)
    assert rc == 0 and again == first, err

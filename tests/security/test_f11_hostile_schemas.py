"""Issue 22, finding 3: the catalog took parameter schemas and adapter specs that break or stall when a
tenant uses them: a remote `$ref` (a tenant's create answered 500 internal_error), a pattern with
catastrophic backtracking (`^(a+)+$`: 1.96 s at 24 characters, doubling with each), and a status module
of Ansible's own (`ansible.builtin.shell`), which `gpuaas apps register` refused and the API took. The
API and the register command now apply one check, and a schema stored past it answers a 4xx, never a
5xx."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
import yaml
from api.world import SLURM_ADAPTER, SLURM_COMPAT, World, build_world, register_allocation
from gpuaas_api.catalog import parameters
from gpuaas_api.catalog.register import RegisterError, build, descriptors
from gpuaas_api.errors import ApiError
from psycopg.types.json import Jsonb

OPSAPP = Path(__file__).resolve().parents[1] / "apps" / "opsapp"
SHELL_REFUSED = "status.module 'ansible.builtin.shell' is not in the app's collection"


@pytest.fixture
def world(client, database) -> World:
    return build_world(client, database)


def schema(**properties) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties}


def post_version(world: World, version: str, adapter: dict, expect: int | None = 201):
    """Register a Slurm version with `adapter` on an active artifact; active when the catalog takes it."""
    artifact = world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/artifacts", 201, json={
        "kind": "oci", "reference": f"registry.example.com/x/v{version}@sha256:{'cd' * 32}"}).json()
    for to in ("staged", "canary", "active"):
        world.call("platform_admin", "POST", f"/v1/catalog/artifacts/{artifact['id']}/transitions", 200,
                   json={"to": to, "reason": "tests"})
    r = world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/versions", expect, json={
        "version": version, "artifact_id": artifact["id"], "compatibility": SLURM_COMPAT, "adapter": adapter})
    if r.status_code == 201:
        world.call("platform_admin", "POST", f"/v1/catalog/apps/slurm/versions/{version}/transitions", 200,
                   json={"to": "active", "reason": "tests", "skip_gates": True})
    return r


def create(world: World, version: str, parameters: dict):
    """A tenant's instance create on `version`, on a fresh allocation of its own."""
    allocation = register_allocation(world, "project_a1", f"alloc-{world.allocations}")
    return world.call("project_admin", "POST", f"/v1/projects/{world.ids['project_a1']}/instances", json={
        "name": f"i{world.allocations}", "app_slug": "slurm", "version": version, "allocation_ids": [allocation["id"]],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}], "parameters": parameters})


def assert_clean_4xx(response) -> dict:
    assert 400 <= response.status_code < 500, response.text
    return response.json()["error"]


@pytest.mark.parametrize("ref", ["https://example.com/schema.json", "http://127.0.0.1:9/s.json",
                                 "other.json#/$defs/name", "#/$defs/missing", "#/properties/site/default"])
def test_a_ref_outside_the_schema_is_refused_at_registration(world, ref):
    parameters = schema(site={"$ref": ref, "default": {"type": "string"}}) | {"$defs": {"name": {"type": "string"}}}
    r = post_version(world, "9.1", SLURM_ADAPTER | {"parameters": parameters}, 422)
    assert r.json()["error"]["code"] == "validation_error"
    assert f"$ref {ref!r}" in r.text, r.text


def test_a_local_ref_within_the_schema_still_works(world):
    parameters = schema(site={"$ref": "#/$defs/name"}) | {"$defs": {"name": {"type": "string", "maxLength": 8}}}
    post_version(world, "9.2", SLURM_ADAPTER | {"parameters": parameters})
    error = assert_clean_4xx(create(world, "9.2", {"site": "much-too-long"}))
    assert error["code"] == "invalid_parameters" and error["details"]["parameter"] == "site"


def test_a_backtracking_pattern_is_refused_or_validated_fast(world):
    parameters = schema(site={"type": "string", "pattern": "^(a+)+$"})
    r = post_version(world, "9.3", SLURM_ADAPTER | {"parameters": parameters}, None)
    if r.status_code == 422:  # refused at registration
        assert "pattern" in r.text, r.text
        return
    assert r.status_code == 201, r.text
    started = time.monotonic()
    response = create(world, "9.3", {"site": "a" * 30 + "!"})
    elapsed = time.monotonic() - started
    assert assert_clean_4xx(response)["code"] == "invalid_parameters"
    assert elapsed < 0.5, f"validating 31 characters took {elapsed:.2f} s"


def test_a_status_module_of_ansibles_own_is_refused_by_the_api_and_by_register(world, tmp_path):
    status = {"module": "ansible.builtin.shell", "role": "controller", "options": {"cmd": "id"}}
    r = post_version(world, "9.4", SLURM_ADAPTER | {"status": status}, 422)
    assert SHELL_REFUSED in r.text, r.text

    source = tmp_path / "src"
    shutil.copytree(OPSAPP, source)
    descriptor = yaml.safe_load((source / "adapters" / "opsapp.yml").read_text())
    descriptor["status"] = descriptor["status"] | {"module": "ansible.builtin.shell"}
    (source / "adapters" / "opsapp.yml").write_text(yaml.safe_dump(descriptor))
    with pytest.raises(RegisterError, match=re.escape(SHELL_REFUSED)):
        descriptors(build(source, tmp_path))


@pytest.mark.parametrize("site", [{"$ref": "http://127.0.0.1:9/s.json"}, {"$ref": "#/$defs/missing"}])
def test_a_schema_stored_past_the_checks_answers_4xx_on_create(world, database, site):
    """Written straight into the database, as an older release or a restore could have left it: a
    tenant's create answers 409 version_not_usable, and reading the catalog still works."""
    post_version(world, "9.5", SLURM_ADAPTER | {"parameters": schema(site={"type": "string"})})
    with database.transaction() as conn:
        conn.execute("UPDATE app_versions SET adapter = jsonb_set(adapter, '{parameters}', %s) "
                     "WHERE app_slug = 'slurm' AND version = '9.5'", (Jsonb(schema(site=site)),))
    error = assert_clean_4xx(create(world, "9.5", {"site": "x"}))
    assert error["code"] == "version_not_usable" and "parameter schema" in error["message"], error
    # Reading the catalog shows the version as stored.
    got = world.call("project_member", "GET", "/v1/catalog/apps/slurm/versions/9.5", 200).json()
    assert got["adapter"]["parameters"]["properties"]["site"] == site
    world.call("project_member", "GET", "/v1/catalog/apps/slurm/versions", 200)


def test_an_instance_whose_version_was_stored_past_the_checks_reads_as_4xx(world, database):
    """The instance exists first; its version's schema is broken afterwards in the database. The
    tenant's reads that check the spec (the inventory, a reconfigure) answer 409, never a 500."""
    post_version(world, "9.6", SLURM_ADAPTER | {"parameters": schema(site={"type": "string"})})
    instance = create(world, "9.6", {"site": "x"})
    assert instance.status_code == 201, instance.text
    with database.transaction() as conn:
        conn.execute("UPDATE app_versions SET adapter = jsonb_set(adapter, '{parameters}', %s) "
                     "WHERE app_slug = 'slurm' AND version = '9.6'",
                     (Jsonb(schema(site={"$ref": "http://127.0.0.1:9/s.json"})),))
    url = f"/v1/instances/{instance.json()['id']}"
    inventory = assert_clean_4xx(world.call("project_admin", "GET", f"{url}/inventory"))
    assert inventory["code"] == "version_not_usable", inventory
    reconfigure = assert_clean_4xx(world.call("project_admin", "POST", f"{url}/reconfigure",
                                              json={"parameters": {"site": "y"}}))
    assert reconfigure["code"] in ("version_not_usable", "instance_not_operable"), reconfigure


@pytest.mark.parametrize(("broken", "value", "status"), [
    ({"$ref": "http://127.0.0.1:9/s.json"}, "x", 409),   # never fetched
    ({"$ref": "#/$defs/missing"}, "x", 409),
    ({"type": "string", "pattern": "(a)\\1"}, "aa", 409),  # a backreference: RE2 refuses it
    ({"$ref": "#/$defs/tree"}, [], 422),                   # values nested past the stack
])
def test_checking_values_against_a_broken_schema_is_a_4xx(broken, value, status):
    """The second line of defence on its own: `validate` given a schema the catalog's checks would refuse."""
    recursive = {"$defs": {"tree": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}
    for _ in range(5000 if isinstance(value, list) else 0):
        value = [value]
    with pytest.raises(ApiError) as raised:
        parameters.validate(schema(site=broken) | recursive, {"site": value}, set())
    assert raised.value.status == status

from __future__ import annotations

import itertools

import pytest
from gpuaas_api.catalog.rules import ARTIFACT_TRANSITIONS, parse_reference
from gpuaas_api.errors import ApiError

from .world import DIGEST, SLURM_ADAPTER, SLURM_COMPAT

STATES = list(ARTIFACT_TRANSITIONS)
LEGAL = {("draft", "staged"), ("staged", "canary"), ("canary", "active"), ("canary", "staged"),
         ("active", "deprecated"), ("deprecated", "retired")}
PATH_TO = {"draft": [], "staged": ["staged"], "canary": ["staged", "canary"],
           "active": ["staged", "canary", "active"], "deprecated": ["staged", "canary", "active", "deprecated"],
           "retired": ["staged", "canary", "active", "deprecated", "retired"]}


def new_artifact(world, n=[0]):  # noqa: B006 - a counter shared by calls on purpose
    n[0] += 1
    return world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/artifacts", 201, json={
        "kind": "oci", "reference": f"registry.example.com/x/r{n[0]}@{DIGEST}"}).json()


def move(world, artifact_id, to, expect=200):
    return world.call("platform_admin", "POST", f"/v1/catalog/artifacts/{artifact_id}/transitions", expect,
                      json={"to": to, "reason": f"to {to}", "skip_gates": True})  # the moves, not the gates


def test_artifact_state_machine_allows_exactly_the_seed_edges(world):
    for start, target in itertools.product(STATES, STATES):
        artifact = new_artifact(world)
        for step in PATH_TO[start]:
            move(world, artifact["id"], step)
        expected = 200 if (start, target) in LEGAL else 422
        r = move(world, artifact["id"], target, expected)
        if expected == 422:
            assert r.json()["error"]["code"] == "illegal_transition", (start, target)
            assert r.json()["error"]["details"]["allowed"] == sorted(ARTIFACT_TRANSITIONS[start])
        else:
            assert r.json()["status"] == target


def test_every_transition_is_audited_with_actor_before_after_reason(world):
    artifact = new_artifact(world)
    move(world, artifact["id"], "staged")
    entries = world.call("platform_admin", "GET", "/v1/audit", 200,
                         params={"action": "apps.catalog.artifact.transition"}).json()["items"]
    entry = next(e for e in entries if e["target_id"] == artifact["id"])
    assert entry["before"] == {"status": "draft"} and entry["after"] == {"status": "staged"}
    assert entry["reason"] == "to staged" and entry["actor_id"]
    assert entry["app_slug"] == "slurm"


@pytest.mark.parametrize("reference", [
    "registry.example.com/gpuaas/slurm:22.05",          # tag only
    "registry.example.com/gpuaas/slurm",                # nothing
    "registry.example.com/gpuaas/slurm@sha256:abc",     # short digest
    "registry.example.com/gpuaas/slurm@md5:" + "a" * 32,
])
def test_references_not_pinned_by_digest_are_rejected(world, reference):
    r = world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/artifacts", 422,
                   json={"kind": "oci", "reference": reference})
    assert r.json()["error"]["code"] in ("reference_not_pinned", "invalid_digest")


def test_reference_parsing():
    ref = parse_reference(f"127.0.0.1:5000/team/app:1.0@{DIGEST}")
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == ("127.0.0.1:5000", "team/app", "1.0", DIGEST)
    assert parse_reference(f"library/busybox@{DIGEST}").registry == "docker.io"
    with pytest.raises(ApiError):
        parse_reference(f"Bad/Upper@{DIGEST}")


def _version(world, version, artifact_id, expect=201):
    return world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/versions", expect, json={
        "version": version, "artifact_id": artifact_id, "compatibility": SLURM_COMPAT, "adapter": SLURM_ADAPTER})


def test_an_active_version_needs_an_active_artifact(world):
    artifact = new_artifact(world)
    _version(world, "9.0", artifact["id"])
    r = world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/versions/9.0/transitions", 409,
                   json={"to": "active", "reason": "too early"})
    assert r.json()["error"]["code"] == "artifact_not_active"
    for step in ("staged", "canary", "active"):
        move(world, artifact["id"], step)
    v = world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/versions/9.0/transitions", 200,
                   json={"to": "active", "reason": "ready", "skip_gates": True}).json()  # the artifact rule
    assert v["status"] == "active" and v["artifact_status"] == "active"
    # Deprecating the artifact deprecates the versions on it, so no active version points at it.
    move(world, artifact["id"], "deprecated")
    v = world.call("project_member", "GET", "/v1/catalog/apps/slurm/versions/9.0", 200).json()
    assert v["status"] == "deprecated"


def test_deprecated_version_cannot_back_a_new_instance_but_existing_ones_stay(world):
    existing = world.ids["instance_a1"]
    world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/versions/1.0.0/transitions", 200,
               json={"to": "deprecated", "reason": "superseded"})
    r = world.call("project_admin", "POST", f"/v1/projects/{world.ids['project_a1']}/instances", 409, json={
        "name": "late", "app_slug": "slurm", "version": "1.0.0", "allocation_ids": [world.ids["alloc_a1"]]})
    assert r.json()["error"]["code"] == "version_not_usable"
    r = world.call("project_admin", "POST", f"/v1/projects/{world.ids['project_a1']}/instances", 409, json={
        "name": "late", "app_slug": "slurm", "allocation_ids": [world.ids["alloc_a1"]]})
    assert r.json()["error"]["code"] == "no_active_version"
    assert world.call("project_admin", "GET", f"/v1/instances/{existing}", 200).json()["app_version"] == "1.0.0"


def test_retiring_is_refused_while_an_instance_references_the_artifact(world):
    version = world.call("project_member", "GET", "/v1/catalog/apps/slurm/versions/1.0.0", 200).json()
    artifact_id = version["artifact_id"]
    move(world, artifact_id, "deprecated")
    r = move(world, artifact_id, "retired", 409)
    assert r.json()["error"]["code"] == "artifact_in_use" and r.json()["error"]["details"]["instances"] == 2
    for key, actor in (("instance_a1", "project_admin"), ("instance_a2", "other_project_admin")):
        world.call(actor, "DELETE", f"/v1/instances/{world.ids[key]}", 204)
    assert move(world, artifact_id, "retired").json()["status"] == "retired"
    r = _version(world, "9.9", artifact_id, 422)
    assert r.json()["error"]["code"] == "artifact_retired"


# Adapter specs the catalog refuses, each with the words its 422 must contain.
CREDENTIAL = {"module": "gpuaas.apps.slurm_info", "role": "controller", "result_key": "config",
              "media_type": "application/yaml", "filename": "config.yaml"}
DISTINCT = ("the secrets, target variables, workload variables, access variable and files variable must have "
            "distinct names")
BAD_SPECS = [
    ({"roles": [{"name": "controller", "min": 2, "max": 1}]}, "min must not exceed max"),
    ({"actions": {"deploy": "gpuaas.apps.slurm_deploy"}}, "actions must include ['decommission']"),
    ({"actions": {"deploy": "not a playbook", "decommission": "gpuaas.apps.d"}}, "String should match pattern"),
    ({"targets": {"members": "slurm_members"}}, "action member_replace needs targets.old and targets.new"),
    ({"status": {"module": "gpuaas.apps.slurm_info", "role": "scheduler"}}, "status names role 'scheduler'"),
    ({"secrets": {"slurm_members": {"kind": "token"}}}, DISTINCT),
    ({"workload": {"artifact_kind": "oci", "variable": "munge_key"}}, DISTINCT),
    ({"vars": {"ansible_connection": "local"}}, "vars sets 'ansible_connection'"),
    ({"secrets": {"munge_key": {"kind": "password"}}}, "Input should be 'random_bytes'"),
    # a credential: read on a declared role, by a module of the app's own collection (never ansible.builtin.slurp,
    # which would read any file the catalog names)
    ({"credentials": {"admin": CREDENTIAL | {"role": "scheduler"}}}, "credentials.admin names role 'scheduler'"),
    ({"credentials": {"admin": CREDENTIAL | {"module": "ansible.builtin.slurp"}}},
     "credentials.admin.module 'ansible.builtin.slurp' is not in the app's collection"),
    ({"credentials": {"Admin Config": CREDENTIAL}}, "String should match pattern"),
    ({"credentials": {"admin": CREDENTIAL | {"filename": "../.ssh/authorized_keys"}}}, "String should match pattern"),
    ({"credentials": {"admin": CREDENTIAL | {"media_type": "yaml"}}}, "String should match pattern"),
]


@pytest.mark.parametrize(("change", "words"), BAD_SPECS)
def test_adapter_spec_is_validated(world, change, words):
    artifact = new_artifact(world)
    r = world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/versions", 422, json={
        "version": "bad", "artifact_id": artifact["id"], "compatibility": SLURM_COMPAT,
        "adapter": SLURM_ADAPTER | change})
    assert r.json()["error"]["code"] == "validation_error"
    assert words in r.text, r.text


def test_the_shipped_slurm_spec_is_stored_typed(world):
    got = world.call("tenant_admin", "GET", "/v1/catalog/apps/slurm/versions/1.0.0", 200).json()["adapter"]
    assert got["roles"][1] | {"description": ""} == {"name": "worker", "min": 1, "max": 64, "groups": ["slurm_workers"],
                                                     "exclusive": False, "description": ""}
    assert got["actions"]["member_add"] == "gpuaas.apps.slurm_member_add"
    assert got["status"]["module"] == "gpuaas.apps.slurm_info"


def test_catalog_lists(world):
    apps = world.call("service_account", "GET", "/v1/catalog/apps", 200).json()["items"]
    assert [a["slug"] for a in apps] == ["slurm"]
    arts = world.call("service_account", "GET", "/v1/catalog/apps/slurm/artifacts", 200,
                      params={"status": "active"}).json()["items"]
    assert len(arts) == 1 and arts[0]["digest"] == DIGEST
    world.call("service_account", "GET", "/v1/catalog/apps/missing", 404)

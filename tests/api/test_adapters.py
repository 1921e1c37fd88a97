"""Adapters are shipped, typed descriptors: the collection's adapters/*.yml validate against the
adapter spec, its published JSON Schema is the model's, and `gpuaas apps register` puts a collection
build into the catalog through the public API, pinned by digest."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from gpuaas_api.catalog.adapter import AppDescriptor
from gpuaas_api.catalog.register import RegisterError, build, register

ROOT = Path(__file__).resolve().parents[2]
OPSAPP = ROOT / "tests" / "apps" / "opsapp"


def test_the_published_json_schema_is_the_models():
    published = json.loads((ROOT / "docs" / "adapter-spec.schema.json").read_text())
    assert published == AppDescriptor.model_json_schema(), (
        "docs/adapter-spec.schema.json is stale: regenerate it from AppDescriptor.model_json_schema()")


@pytest.mark.parametrize("path", sorted((ROOT / "adapters").glob("*.yml")), ids=lambda p: p.name)
def test_every_shipped_descriptor_is_valid(path):
    descriptor = AppDescriptor.model_validate(yaml.safe_load(path.read_text()))
    for playbook in [*descriptor.actions.values(), *([descriptor.cleanup] if descriptor.cleanup else [])]:
        assert (ROOT / "playbooks" / f"{playbook.removeprefix('gpuaas.apps.')}.yml").is_file(), playbook
    for module in [c.module for c in descriptor.credentials.values()]:
        assert (ROOT / "plugins" / "modules" / f"{module.removeprefix('gpuaas.apps.')}.py").is_file(), module


# Files of api/ that may name Slurm in code: the demo's scenario (it deploys Slurm on purpose), the
# test hosts it starts (their image carries the Slurm packages), and the catalog's list of runtime
# backends (a word a tenant filters apps by).
SLURM_ALLOWED = {"api/gpuaas_api/demo.py", "api/gpuaas_api/commands/demo.py", "api/gpuaas_api/testhosts.py"}


def test_no_adapter_data_lives_in_the_control_service():
    """Slurm appears in the rest of api/ only in docstrings and comments: the adapter is the descriptor."""
    found = subprocess.run(["git", "grep", "-il", "slurm", "--", "api/"], cwd=ROOT, capture_output=True,
                           text=True).stdout.split()
    code_mentions = {}
    for path in set(found) - SLURM_ALLOWED:
        text = (ROOT / path).read_text()
        lines = [line.strip() for n, line in enumerate(text.splitlines(), 1) if "slurm" in line.lower()
                 and not _in_prose(text, n) and not line.startswith("RuntimeBackend = ")]
        if lines:
            code_mentions[path] = lines
    assert code_mentions == {}, code_mentions


def _in_prose(text: str, line_number: int) -> bool:
    """Whether a line is a comment or inside a docstring."""
    lines = text.splitlines()
    line = lines[line_number - 1].strip()
    if line.startswith("#"):
        return True
    quotes = sum(text_line.count('"""') for text_line in lines[:line_number - 1])
    return quotes % 2 == 1 or line.startswith('"""')


def _admin(world) -> TestClient:
    return TestClient(world.client.app, headers=world.headers("platform_admin"))


def test_register_a_collection_through_the_api(world, tmp_path):
    tarball = build(OPSAPP, tmp_path)
    digest = "sha256:" + hashlib.sha256(tarball.read_bytes()).hexdigest()
    (registered,) = register(_admin(world), tarball, activate=True, skip_gates=True)
    assert (registered.app, registered.version, registered.digest, registered.status) == (
        "opsapp", "1.0.0", digest, "active")
    version = world.call("platform_admin", "GET", "/v1/catalog/apps/opsapp/versions/1.0.0", 200).json()
    assert version["artifact_reference"].endswith(f"@{digest}")
    assert version["adapter"]["actions"]["deploy"] == "gpuaas_tests.opsapp.step"
    assert world.call("platform_admin", "GET", f"/v1/content/{digest}", 200).content == tarball.read_bytes()
    # Registering the same build again changes nothing.
    (again,) = register(_admin(world), tarball, activate=True, skip_gates=True)
    assert again == registered


def test_register_refuses_a_descriptor_naming_content_the_build_lacks(world, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(OPSAPP, source)
    descriptor = yaml.safe_load((source / "adapters" / "opsapp.yml").read_text())
    descriptor["actions"]["deploy"] = "gpuaas_tests.opsapp.missing"
    (source / "adapters" / "opsapp.yml").write_text(yaml.safe_dump(descriptor))
    with pytest.raises(RegisterError, match="does not ship: gpuaas_tests.opsapp.missing"):
        register(_admin(world), source, activate=True, skip_gates=True)
    assert world.client.get("/v1/catalog/apps/opsapp", headers=world.headers("platform_admin")).status_code == 404


def test_register_refuses_a_credential_module_the_build_lacks(world, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(OPSAPP, source)
    descriptor = yaml.safe_load((source / "adapters" / "opsapp.yml").read_text())
    (credential,) = descriptor["credentials"].values()
    credential["module"] = "gpuaas_tests.opsapp.no_such_reader"
    (source / "adapters" / "opsapp.yml").write_text(yaml.safe_dump(descriptor))
    with pytest.raises(RegisterError, match="does not ship: gpuaas_tests.opsapp.no_such_reader"):
        register(_admin(world), source, activate=True, skip_gates=True)


def test_register_refuses_a_new_build_under_a_registered_version(world, tmp_path):
    register(_admin(world), OPSAPP, activate=True, skip_gates=True)
    source = tmp_path / "src"
    shutil.copytree(OPSAPP, source)
    (source / "playbooks" / "step.yml").write_text((source / "playbooks" / "step.yml").read_text() + "\n")
    with pytest.raises(RegisterError, match="already registered with another build"):
        register(_admin(world), source, activate=True, skip_gates=True)


def test_register_pins_a_workload_image_per_version(world, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(OPSAPP, source)
    descriptor = yaml.safe_load((source / "adapters" / "opsapp.yml").read_text())
    descriptor["workload"] = {"artifact_kind": "oci", "variable": "opsapp_image"}
    (source / "adapters" / "opsapp.yml").write_text(yaml.safe_dump(descriptor))
    # A build version with semver build metadata ("+") still makes a valid reference tag.
    galaxy = yaml.safe_load((source / "galaxy.yml").read_text()) | {"version": "1.0.0+build.7"}
    (source / "galaxy.yml").write_text(yaml.safe_dump(galaxy))
    tarball = build(source, tmp_path)
    images = {tag: f"127.0.0.1:5000/team/web@sha256:{hashlib.sha256(tag.encode()).hexdigest()}" for tag in "ab"}

    (app_only,) = register(_admin(world), tarball, activate=True, skip_gates=True)
    assert (app_only.app, app_only.status) == ("opsapp", "needs_workload")
    with pytest.raises(RegisterError, match="no descriptor of this build declares"):
        register(_admin(world), tarball, workloads={"slurm": images["a"]})

    with pytest.raises(RegisterError, match="without a --workload image"):
        register(_admin(world), tarball, signers={"opsapp": "key"})
    (stable,) = register(_admin(world), tarball, activate=True, workloads={"opsapp": images["a"]}, skip_gates=True)
    (candidate,) = register(_admin(world), tarball, canary=True, workloads={"opsapp": images["b"]}, skip_gates=True)
    assert (stable.version, stable.status) == (f"1.0.0+{images['a'][-64:][:12]}", "active")
    assert (candidate.version, candidate.status) == (f"1.0.0+{images['b'][-64:][:12]}", "canary")
    got = world.call("platform_admin", "GET", f"/v1/catalog/apps/opsapp/versions/{candidate.version}", 200).json()
    assert (got["workload_artifact_reference"], got["workload_artifact_status"], got["artifact_id"]) == (
        images["b"], "canary", stable.artifact_id)
    assert got["artifact_reference"].startswith("collections/gpuaas_tests.opsapp:1.0.0_build.7@sha256:")
    # Again: nothing new; then the candidate is promoted.
    assert register(_admin(world), tarball, canary=True, workloads={"opsapp": images["b"]},
                    skip_gates=True) == [candidate]
    (promoted,) = register(_admin(world), tarball, activate=True, workloads={"opsapp": images["b"]}, skip_gates=True)
    assert (promoted.version, promoted.status) == (candidate.version, "active")


def test_a_collection_artifact_needs_its_content_stored(world):
    r = world.call("platform_admin", "POST", "/v1/catalog/apps/slurm/artifacts", 422, json={
        "kind": "collection", "reference": "collections/gpuaas.apps:0.1.0@sha256:" + "cd" * 32})
    assert r.json()["error"]["code"] == "artifact_content_missing"


def test_the_cli_needs_the_admin_token(tmp_path):
    # A token from `gpuaas login` or GPUAAS_TOKEN, as for every client command; this home has none stored.
    done = subprocess.run([str(Path(sys.executable).parent / "gpuaas"), "apps", "register", str(OPSAPP),
                           "--url", "http://127.0.0.1:8000"],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 1 and "run `gpuaas login` or set GPUAAS_TOKEN" in done.stderr, done.stderr

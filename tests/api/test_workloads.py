"""Versions that pin a workload artifact (an OCI image, by its own digest) besides the collection build
their runs execute, canary versions that only opted-in instances may bind, and the image a run gets."""

from __future__ import annotations

import hashlib
from uuid import UUID

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from gpuaas_api.config import OperationSettings
from gpuaas_api.executor import plan as planner
from gpuaas_api.instances import service as instances

from .world import DIGEST, SLURM_ADAPTER, SLURM_COMPAT, register_allocation

APP = "web"
ADAPTER = {
    "roles": [{"name": "replica", "min": 1, "max": 4, "groups": ["oci_replicas"]}],
    "actions": {"deploy": "gpuaas.apps.oci_deploy", "upgrade": "gpuaas.apps.oci_upgrade",
                "decommission": "gpuaas.apps.oci_decommission"},
    "workload": {"artifact_kind": "oci", "variable": "oci_workload_image",
                 "signer_key_variable": "oci_trust_public_key"},
    "compatibility": SLURM_COMPAT,
}


def image(tag: str) -> str:
    return f"registry.example.com:5000/team/web:{tag}@sha256:{hashlib.sha256(tag.encode()).hexdigest()}"


def signer_key() -> str:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def artifact(w, kind: str, reference: str, to: str = "active", signer: str | None = None) -> dict:
    created = w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/artifacts", 201,
                     json={"kind": kind, "reference": reference, "signer_public_key": signer}).json()
    for status in ("staged", "canary", "active")[:("staged", "canary", "active").index(to) + 1]:
        w.call("platform_admin", "POST", f"/v1/catalog/artifacts/{created['id']}/transitions", 200,
               json={"to": status, "reason": "tests"})
    return created


def version(w, name: str, workload_artifact: dict | None, expect: int = 201, adapter: dict | None = None):
    body = {"version": name, "artifact_id": w.ids["web_controller"], "adapter": adapter or ADAPTER}
    if workload_artifact:
        body["workload_artifact_id"] = workload_artifact["id"]
    return w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/versions", expect, json=body)


def publish(w, name: str, to: str) -> dict:
    return w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/versions/{name}/transitions", 200,
                  json={"to": to, "reason": "tests", "skip_gates": True}).json()  # the workload rules, not the gates


def setup_app(w) -> None:
    w.call("platform_admin", "POST", "/v1/catalog/apps", 201,
           json={"slug": APP, "display_name": "Web", "runtime_backend": "oci"})
    w.ids["web_controller"] = artifact(w, "controller", f"registry.example.com/gpuaas/web-playbooks:1@{DIGEST}")["id"]
    w.call("platform_admin", "POST", f"/v1/projects/{w.ids['project_a1']}/entitlements", 201, json={"app_slug": APP})
    w.ids["alloc_web"] = register_allocation(w, "project_a1", "alloc-web", hosts=4)["id"]


def create(w, name: str, expect: int = 201, **body):
    return w.call("service_account", "POST", f"/v1/projects/{w.ids['project_a1']}/instances", expect, json={
        "name": name, "app_slug": APP, "allocation_ids": [w.ids["alloc_web"]],
        "topology": [{"role": "replica", "count": 1}]} | body)


def code(response) -> str:
    return response.json()["error"]["code"]


def test_a_workload_version_pins_its_own_artifact(world, database, tmp_path):
    setup_app(world)
    r = world.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/artifacts", 422,
                   json={"kind": "oci", "reference": image("v0"), "signer_public_key": "-----BEGIN PUBLIC KEY-----"})
    assert "must be a PEM public key" in r.text
    key = signer_key()
    stable = artifact(world, "oci", image("v1"), signer=key)
    assert stable["signer_public_key"] == key
    assert code(version(world, "0.1", None, 422)) == "workload_artifact_required"
    assert code(version(world, "0.1", stable, 422, adapter={**SLURM_ADAPTER, "compatibility": SLURM_COMPAT})) == \
        "workload_not_declared"
    playbooks = {"id": world.ids["web_controller"]}
    assert code(version(world, "0.1", playbooks, 422)) == "workload_artifact_kind"

    got = version(world, "1.0", stable).json()
    assert (got["workload_artifact_id"], got["workload_artifact_reference"], got["workload_artifact_status"]) == (
        stable["id"], image("v1"), "active")
    publish(world, "1.0", "active")
    inst = create(world, "web-1").json()
    assert inst["workload_artifact_reference"] == image("v1") and inst["canary"] is False

    # A run gets the image by digest alone: the tag the reference carried is not what is pulled.
    with database.transaction() as conn:
        run = planner.build(conn, OperationSettings(state_dir=tmp_path), {
            "kind": "deploy", "params": {}, "member_ids": []}, instances.get_instance(conn, UUID(inst["id"])))
    digest = image("v1").split("@")[1]
    assert run.extravars["oci_workload_image"] == f"registry.example.com:5000/team/web@{digest}"
    assert run.extravars["oci_trust_public_key"] == key
    assert run.playbook == "gpuaas.apps.oci_deploy"

    # Retiring the image is refused while an instance runs it.
    for status in ("deprecated", "retired"):
        r = world.call("platform_admin", "POST", f"/v1/catalog/artifacts/{stable['id']}/transitions",
                       200 if status == "deprecated" else 409, json={"to": status, "reason": "tests"})
    assert code(r) == "artifact_in_use"
    assert world.call("tenant_admin", "GET", f"/v1/catalog/apps/{APP}/versions/1.0", 200).json()["status"] == \
        "deprecated"


def test_canary_versions_bind_only_instances_that_opted_in(world, database):
    setup_app(world)
    version(world, "1.0", artifact(world, "oci", image("v1")))
    publish(world, "1.0", "active")
    candidate = artifact(world, "oci", image("v2"), to="canary")
    version(world, "2.0-rc", candidate)
    r = world.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/versions/2.0-rc/transitions", 409,
                   json={"to": "active", "reason": "too early"})
    assert code(r) == "artifact_not_active" and r.json()["error"]["details"]["artifact_reference"] == image("v2")
    assert publish(world, "2.0-rc", "canary")["status"] == "canary"

    r = create(world, "plain", 409, version="2.0-rc")
    assert code(r) == "version_not_usable" and "opted in to canary" in r.json()["error"]["message"]
    early = create(world, "early", version="2.0-rc", canary=True).json()
    assert (early["app_version"], early["canary"], early["workload_artifact_reference"]) == (
        "2.0-rc", True, image("v2"))

    # The newest active version stays the default, canary or not; an upgrade to the canary needs the opt-in.
    plain = create(world, "plain").json()
    assert plain["app_version"] == "1.0"
    target = world.call("tenant_admin", "GET", f"/v1/catalog/apps/{APP}/versions/2.0-rc", 200).json()["id"]
    with database.transaction() as conn:
        for status in ("starting", "running"):
            instances.transition_instance(conn, UUID(plain["id"]), status, reason="tests")
    upgrade = f"/v1/instances/{plain['id']}/upgrade"
    assert code(world.call("service_account", "POST", upgrade, 409, json={"app_version_id": target})) == \
        "version_not_usable"
    patched = world.call("service_account", "PATCH", f"/v1/instances/{plain['id']}", 200, json={"canary": True})
    assert patched.json()["canary"] is True and patched.json()["labels"] == plain["labels"]
    op = world.call("service_account", "POST", upgrade, 202, json={"app_version_id": target}).json()
    assert op["kind"] == "upgrade"

    # The candidate goes back to staged: its canary version returns to draft and binds no one.
    world.call("platform_admin", "POST", f"/v1/catalog/artifacts/{candidate['id']}/transitions", 200,
               json={"to": "staged", "reason": "canary failed"})
    assert world.call("tenant_admin", "GET", f"/v1/catalog/apps/{APP}/versions/2.0-rc", 200).json()["status"] == \
        "draft"
    assert code(create(world, "late", 409, version="2.0-rc", canary=True)) == "version_not_usable"
    assert code(world.call("service_account", "PATCH", f"/v1/instances/{plain['id']}", 422,
                           json={"canary": None})) == "validation_error"

"""File artifacts (issue 29 item 4; docs/control-service.md "File artifacts"): files addressed by digest, their bytes
in the content store (in the uploader's scope) or behind a source URL under an allowlisted prefix; a version pins
one for each name its adapter's `files:` declares; a run gets each by digest, with its place on the host computed
from the digest and the worker's verified copy. Real PostgreSQL, the real app, the world of tests/api/world.py."""

from __future__ import annotations

import dataclasses
import hashlib
from uuid import UUID

import psycopg
import pytest
from gpuaas_api.catalog import service as catalog
from gpuaas_api.catalog.files import host_path
from gpuaas_api.config import OperationSettings
from gpuaas_api.content.store import ContentStore, embedded_store
from gpuaas_api.executor import plan as planner
from gpuaas_api.executor.content import ContentRefused, run_file_copies
from gpuaas_api.iam.auth import Principal
from gpuaas_api.instances import service as instances

from .test_catalog_publishers import seat
from .world import DIGEST, SLURM_COMPAT, World, register_allocation

APP = "web"
SOURCES = ("https://files.example.com/models/",)
ADAPTER = {
    "roles": [{"name": "replica", "min": 1, "max": 4, "groups": ["oci_replicas"]}],
    "actions": {"deploy": "gpuaas.apps.oci_deploy", "decommission": "gpuaas.apps.oci_decommission"},
    "files": {"variable": "oci_workload_files",
              "needs": {"site": {"mount": "/www/site.txt", "description": "the page the service serves"},
                        "extra": {"required": False}}},
    "compatibility": SLURM_COMPAT,
}


@pytest.fixture
def w(world: World, app, database, tmp_path) -> World:
    app.state.content_store = ContentStore(tmp_path / "content", database)
    app.state.settings = dataclasses.replace(app.state.settings, file_artifact_sources=SOURCES)
    return world


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def code(response) -> str:
    return response.json()["error"]["code"]


def register(w: World, body: dict, expect: int = 201, actor: str = "platform_admin", app: str = APP):
    return w.call(actor, "POST", f"/v1/catalog/apps/{app}/artifacts", expect, json={"kind": "file"} | body)


def promote(w: World, artifact_id: str, to: str = "active") -> None:
    for status in ("staged", "canary", "active")[:("staged", "canary", "active").index(to) + 1]:
        w.call("platform_admin", "POST", f"/v1/catalog/artifacts/{artifact_id}/transitions", 200,
               json={"to": status, "reason": "tests"})


def setup_app(w: World) -> None:
    w.call("platform_admin", "POST", "/v1/catalog/apps", 201,
           json={"slug": APP, "display_name": "Web", "runtime_backend": "oci"})
    controller = w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/artifacts", 201, json={
        "kind": "controller", "reference": f"registry.example.com/gpuaas/web-playbooks:1@{DIGEST}"}).json()
    promote(w, controller["id"])
    w.ids["web_controller"] = controller["id"]



def web_instance(w) -> dict:
    """Project A1 entitled to the app, an allocation, and one instance of its active version there."""
    w.call("platform_admin", "POST", f"/v1/projects/{w.ids['project_a1']}/entitlements", 201, json={"app_slug": APP})
    w.ids["alloc_web"] = register_allocation(w, "project_a1", "alloc-web")["id"]
    return w.call("service_account", "POST", f"/v1/projects/{w.ids['project_a1']}/instances", 201, json={
        "name": "web-1", "app_slug": APP, "allocation_ids": [w.ids["alloc_web"]],
        "topology": [{"role": "replica", "count": 1}]}).json()

def test_a_file_artifact_is_in_the_content_store_or_under_an_allowed_source(w):
    setup_app(w)
    data = b"<h1>served from a file artifact</h1>\n"
    digest = sha256(data)
    missing = register(w, {"reference": f"site.html@{digest}"}, 422)
    assert code(missing) == "artifact_content_missing" and missing.json()["error"]["details"]["digest"] == digest
    w.call("platform_admin", "PUT", f"/v1/content/{digest}", 201, content=data)
    stored = register(w, {"reference": f"site.html@{digest}", "media_type": "text/html"}).json()
    assert (stored["kind"], stored["digest"], stored["repository"], stored["size"], stored["media_type"],
            stored["source"], stored["status"]) == ("file", digest, "site.html", len(data), "text/html", None, "draft")
    assert w.call("tenant_admin", "GET", f"/v1/catalog/artifacts/{stored['id']}", 200).json()["size"] == len(data)

    refused = {
        "weights.bin": "reference_not_pinned",
        "weights.bin@sha256:" + "AB" * 32: "invalid_digest",
        "weights.bin@sha512:" + "ab" * 64: "invalid_digest",
        f"../weights@{digest}": "invalid_reference",
        f"registry.example.com/x@{digest}": "invalid_reference",
    }
    for reference, expected in refused.items():
        assert code(register(w, {"reference": reference}, 422)) == expected, reference

    # A source: a plain URL under an allowlisted prefix; the hosts fetch it and verify the digest.
    remote = "sha256:" + "cd" * 32
    url = "https://files.example.com/models/llm/weights.safetensors"
    sourced = register(w, {"reference": f"weights@{remote}", "source": url, "size": 1 << 30}).json()
    assert (sourced["source"], sourced["size"], sourced["media_type"]) == (url, 1 << 30, "application/octet-stream")
    for bad in ("https://files.example.com/other/weights", "https://files.example.com/models-evil/w",
                "http://files.example.com/models/w", "https://files.example.com/models/../secrets/w",
                "https://user@files.example.com/models/w", "https://files.example.com/models/w?x=1",
                "https://files.example.com/models/%2e%2e/w", "file:///etc/shadow", "https://[files.example.com/models/w"):
        answer = register(w, {"reference": f"weights@{remote}", "source": bad}, 422)
        assert code(answer) == "file_source_not_allowed", bad
        assert answer.json()["error"]["details"]["allowed"] == list(SOURCES)
    # Source, size and media type are a file's alone.
    assert code(w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/artifacts", 422, json={
        "kind": "oci", "reference": f"registry.example.com/x/y@{digest}", "source": url})) == "validation_error"


def test_a_version_pins_the_files_its_adapter_needs_and_a_run_gets_them_by_digest(w, database, tmp_path):
    setup_app(w)
    data = b"the file a version needs\n"
    digest = sha256(data)
    w.call("platform_admin", "PUT", f"/v1/content/{digest}", 201, content=data)
    site = register(w, {"reference": f"site.txt@{digest}"}).json()

    def version(name: str, files: dict, expect: int = 201, adapter: dict = ADAPTER):
        return w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/versions", expect, json={
            "version": name, "artifact_id": w.ids["web_controller"], "adapter": adapter, "files": files})

    answer = version("0.1", {}, 422)
    assert code(answer) == "file_artifact_required" and answer.json()["error"]["details"]["names"] == ["site"]
    assert code(version("0.1", {"site": site["id"], "other": site["id"]}, 422)) == "file_not_declared"
    assert code(version("0.1", {"site": w.ids["web_controller"]}, 422)) == "file_artifact_kind"
    # The files variable is the platform's: a tenant parameter of that name is refused with the adapter.
    clash = ADAPTER | {"parameters": {"type": "object", "additionalProperties": False,
                                      "properties": {"oci_workload_files": {"type": "object"}}}}
    assert w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/versions", 422, json={
        "version": "0.1", "artifact_id": w.ids["web_controller"], "adapter": clash,
        "files": {"site": site["id"]}}).status_code == 422

    pinned = version("1.0", {"site": site["id"]}).json()
    assert pinned["files"]["site"] | {"artifact_id": None} == {
        "artifact_id": None, "reference": f"site.txt@{digest}", "digest": digest, "status": "draft",
        "size": len(data), "media_type": "application/octet-stream", "source": None}
    # A version stands on its files as on its other artifacts: active only once they are.
    refused = w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/versions/1.0/transitions", 409,
                     json={"to": "active", "reason": "too early", "skip_gates": True})
    assert code(refused) == "artifact_not_active"
    assert refused.json()["error"]["details"]["artifact_reference"] == f"site.txt@{digest}"
    promote(w, site["id"])
    w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/versions/1.0/transitions", 200,
           json={"to": "active", "reason": "tests", "skip_gates": True})

    inst = web_instance(w)

    # The run gets the file by digest: its place on the host computed from the digest, the bytes from the worker's
    # verified copy. A tenant value chooses neither.
    settings = OperationSettings(state_dir=tmp_path / "worker")
    with database.transaction() as conn:
        run = planner.build(conn, settings, {"kind": "deploy", "params": {}, "member_ids": []},
                            instances.get_instance(conn, UUID(inst["id"])))
    store = embedded_store(settings.state_dir, database)
    hex_ = digest.split(":")[1]
    assert run.extravars["oci_workload_files"] == {"site": {
        "name": "site", "digest": digest, "size": len(data), "media_type": "application/octet-stream",
        "path": f"/var/lib/gpuaas/files/sha256/{hex_}", "mount": "/www/site.txt",
        "src": str(store.local_path(digest))}}
    assert host_path(digest) == run.extravars["oci_workload_files"]["site"]["path"]
    assert run.file_digests == [digest]

    # The worker's copy is verified before every run: an altered local copy is fetched again from the database;
    # bytes in the database that no longer hash to the digest refuse the run, naming it.
    assert not store.local_path(digest).exists()
    run_file_copies(store, run)
    assert store.local_path(digest).read_bytes() == data
    copy = store.local_path(digest)
    copy.chmod(0o644)
    copy.write_bytes(b"tampered on the worker\n")
    run_file_copies(store, run)
    assert store.local_path(digest).read_bytes() == data
    with database.transaction() as conn:
        conn.execute("UPDATE content_chunks SET data = %s WHERE digest = %s", (b"tampered in the database\n", digest))
    store.local_path(digest).unlink()
    with pytest.raises(ContentRefused) as tampered:
        run_file_copies(store, run)
    assert tampered.value.code == "artifact_digest_mismatch" and digest in str(tampered.value)
    assert not store.local_path(digest).exists()

    # A file in use is not retired; deprecating it deprecates the active version on it.
    w.call("platform_admin", "POST", f"/v1/catalog/artifacts/{site['id']}/transitions", 200,
           json={"to": "deprecated", "reason": "tests"})
    assert w.call("tenant_admin", "GET", f"/v1/catalog/apps/{APP}/versions/1.0", 200).json()["status"] == "deprecated"
    retired = w.call("platform_admin", "POST", f"/v1/catalog/artifacts/{site['id']}/transitions", 409,
                     json={"to": "retired", "reason": "tests"})
    assert code(retired) == "artifact_in_use"


def test_a_source_no_longer_allowed_refuses_the_run(w, database, tmp_path):
    setup_app(w)
    url = "https://files.example.com/models/site.txt"
    site = register(w, {"reference": "site.txt@sha256:" + "ef" * 32, "source": url, "size": 12}).json()
    promote(w, site["id"])
    w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/versions", 201, json={
        "version": "1.0", "artifact_id": w.ids["web_controller"], "adapter": ADAPTER, "files": {"site": site["id"]}})
    w.call("platform_admin", "POST", f"/v1/catalog/apps/{APP}/versions/1.0/transitions", 200,
           json={"to": "active", "reason": "tests", "skip_gates": True})
    inst = web_instance(w)
    op = {"kind": "deploy", "params": {}, "member_ids": []}
    with database.transaction() as conn:
        instance = instances.get_instance(conn, UUID(inst["id"]))
        run = planner.build(conn, OperationSettings(state_dir=tmp_path, file_artifact_sources=SOURCES), op, instance)
        assert run.extravars["oci_workload_files"]["site"]["url"] == url and run.file_digests == []
        assert "src" not in run.extravars["oci_workload_files"]["site"]
        with pytest.raises(Exception) as refused:
            planner.build(conn, OperationSettings(state_dir=tmp_path, file_artifact_sources=()), op, instance)
    assert getattr(refused.value, "code", None) == "file_source_not_allowed"
    # A version's move holds its pinned file (FOR SHARE) until it commits: a concurrent deprecation of the file waits
    # rather than slipping between the version's check and its update.
    with database.transaction() as conn:
        catalog.transition_version(conn, Principal(kind="system", id=None, name="tests"), APP, "1.0", "deprecated",
                                   "tests")
        with database.transaction() as other:
            other.execute("SET LOCAL lock_timeout = '200ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute("UPDATE artifacts SET status = 'deprecated' WHERE id = %s", (site["id"],))
    # An AWX job's variables would lack the files variable (only the platform's own runs deliver files): refused.
    awx = w.call("service_account", "GET", f"/v1/instances/{inst['id']}/inventory", 422)
    assert code(awx) == "files_not_external" and awx.json()["error"]["details"]["files"] == ["site"]


def test_a_tenant_cannot_pin_another_tenants_private_file(w):
    seat(w, "tenant_admin", "publisher_a", "tenant_a", {"tenant_id": w.ids["tenant_a"]})
    seat(w, "other_tenant_admin", "publisher_b", "tenant_b", {"tenant_id": w.ids["tenant_b"]})
    for actor, slug, tenant in (("publisher_a", "tenant-a-models", "tenant_a"),
                                ("publisher_b", "tenant-b-models", "tenant_b")):
        w.call(actor, "POST", "/v1/catalog/apps", 201, json={
            "slug": slug, "display_name": slug, "runtime_backend": "oci", "tenant_id": w.ids[tenant]})
    private = b"tenant A's private weights\n"
    digest = sha256(private)
    w.call("publisher_a", "PUT", f"/v1/content/{digest}", 201, content=private)
    register(w, {"reference": f"weights@{digest}"}, actor="publisher_a", app="tenant-a-models")
    # Tenant B knows the digest but not the bytes: the store answers as for content that does not exist.
    answer = register(w, {"reference": f"weights@{digest}"}, 422, actor="publisher_b", app="tenant-b-models")
    assert code(answer) == "artifact_content_missing"
    # Once tenant B uploads the same bytes itself, they are its to pin too.
    w.call("publisher_b", "PUT", f"/v1/content/{digest}", 201, content=private)
    register(w, {"reference": f"weights@{digest}"}, actor="publisher_b", app="tenant-b-models")

"""Tenant-private registries (issue 29 item 3; docs/control-service.md "Tenant-private registries"): the platform
admin's allowlist of registry hosts, a tenant admin's registries on it (credentials kept encrypted, never answered),
their images backing only the tenant's private apps, and the tenant's runs pulling with their credentials, masked as
the platform registry's per-run credential is. Real PostgreSQL, the real app, the world of tests/api/world.py."""

from __future__ import annotations

import dataclasses
import json
from uuid import UUID

import pytest
from gpuaas_api.config import OperationSettings
from gpuaas_api.errors import ApiError
from gpuaas_api.executor import plan as planner
from gpuaas_api.instances import service as instances
from gpuaas_api.secrets import service as secrets

from .test_workloads import ADAPTER
from .world import DIGEST, World, register_allocation

HOST = "registry.acme.example:5000"
PASSWORD = "pull-secret-Zq83xv-never-answered"
ROTATED = "rotated-secret-Kf02mw-never-answered"
IMAGE = f"{HOST}/acme/web:1@sha256:{'cd' * 32}"
PULL = "oci_workload_pull"
PULL_ADAPTER = ADAPTER | {"workload": ADAPTER["workload"] | {"pull_credential_variable": PULL}}


@pytest.fixture
def w(world: World, app, tmp_path) -> World:
    world.settings = app.state.operation_settings = OperationSettings(
        state_dir=tmp_path, pull_credential_registries=frozenset({"platform.example:5000"}))
    # A tenant's private versions are no platform admin's to move past a gate: an operator who names no promotion
    # gates (tests/api/test_promotion_gates.py runs them).
    app.state.settings = dataclasses.replace(app.state.settings, promotion_staging_checks=(),
                                             promotion_canary_smoke=False, promotion_canary_instances=0)
    return world


def code(response) -> str:
    return response.json()["error"]["code"]


def allow(w: World, host: str = HOST) -> None:
    w.call("platform_admin", "POST", "/v1/registries/allowlist", 201, json={"host": host})


def register(w: World, actor: str = "tenant_admin", tenant: str = "tenant_a", expect: int = 201, **body):
    return w.call(actor, "POST", f"/v1/tenants/{w.ids[tenant]}/registries", expect, json={
        "name": "acme-images", "host": HOST, "username": "puller", "password": PASSWORD} | body)


def no_password(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text and ROTATED not in text


def audit_rows(database) -> str:
    with database.transaction() as conn:
        return json.dumps(conn.execute("SELECT * FROM audit_log WHERE action LIKE 'registries.%%' ORDER BY id")
                          .fetchall(), default=str)


def test_the_allowlist_is_the_platform_admins(w, database):
    for actor in ("tenant_admin", "project_admin", "service_account"):
        assert w.call(actor, "POST", "/v1/registries/allowlist", 403, json={"host": HOST}).status_code == 403
        w.call(actor, "GET", "/v1/registries/allowlist", 403)
    added = w.call("platform_admin", "POST", "/v1/registries/allowlist", 201, json={"host": HOST, "note": "acme"})
    assert added.headers["Location"] == f"/v1/registries/allowlist/{HOST}"
    assert w.call("platform_admin", "GET", added.headers["Location"], 200).json()["note"] == "acme"
    assert code(w.call("platform_admin", "POST", "/v1/registries/allowlist", 409, json={"host": HOST})) == \
        "already_exists"
    # The platform's own registry gets the platform's per-run credentials: never a tenant's.
    reserved = w.call("platform_admin", "POST", "/v1/registries/allowlist", 422, json={"host": "platform.example:5000"})
    assert code(reserved) == "registry_host_reserved"
    # One spelling per host, as references name it.
    w.call("platform_admin", "POST", "/v1/registries/allowlist", 422, json={"host": "Registry.ACME.example"})
    assert [e["host"] for e in w.call("platform_admin", "GET", "/v1/registries/allowlist", 200).json()["items"]] == \
        [HOST]
    w.call("tenant_admin", "DELETE", f"/v1/registries/allowlist/{HOST}", 403)
    w.call("platform_admin", "DELETE", f"/v1/registries/allowlist/{HOST}", 200)
    w.call("platform_admin", "DELETE", f"/v1/registries/allowlist/{HOST}", 404)
    assert [r["action"] for r in json.loads(audit_rows(database))] == [
        "registries.allowlist.add", "registries.allowlist.remove"]


def test_a_tenant_admin_registers_an_allowlisted_host_and_never_gets_the_password_back(w, database):
    refused = register(w, expect=422)
    assert code(refused) == "registry_not_allowlisted" and "allowlist" in refused.json()["error"]["message"]
    allow(w)
    created = register(w)
    body = created.json()
    assert created.headers["Location"] == f"/v1/tenants/{w.ids['tenant_a']}/registries/{body['id']}"
    assert (body["host"], body["username"], body["credentials_set"]) == (HOST, "puller", True)
    assert code(register(w, expect=409, name="again")) == "already_exists"  # one per (tenant, host)
    # Not the tenant admin's alone to read: project people of the tenant see the tenant (403), others nothing (404).
    for actor in ("project_admin", "project_member"):
        w.call(actor, "GET", f"/v1/tenants/{w.ids['tenant_a']}/registries", 403)
        register(w, actor=actor, expect=403, host="other.example")
    registry = f"/v1/tenants/{w.ids['tenant_a']}/registries/{body['id']}"
    listed = w.call("tenant_admin", "GET", f"/v1/tenants/{w.ids['tenant_a']}/registries", 200)
    shown = w.call("tenant_admin", "GET", registry, 200)
    rotated = w.call("tenant_admin", "PUT", f"{registry}/credentials", 200,
                     json={"username": "puller2", "password": ROTATED})
    assert rotated.json()["username"] == "puller2" and rotated.json()["credentials_rotated_at"]
    with database.transaction() as conn:
        stored = conn.execute("SELECT * FROM tenant_registries").fetchone()
    assert ROTATED.encode() not in bytes(stored["password_sealed"])  # sealed, not kept in clear
    assert secrets.cipher(w.settings).decrypt(bytes(stored["password_sealed"])) == ROTATED.encode()

    # Tenant B's admin meets the answers of a tenant that does not exist.
    missing = w.call("other_tenant_admin", "GET", f"/v1/tenants/{UUID(int=7)}/registries", 404).json()["error"]
    for method, path in (("GET", registry), ("GET", f"/v1/tenants/{w.ids['tenant_a']}/registries"),
                         ("DELETE", registry), ("PUT", f"{registry}/credentials")):
        hidden = w.call("other_tenant_admin", method, path, 404,
                        json={"username": "x", "password": "y"} if method == "PUT" else None).json()["error"]
        assert (hidden["code"], hidden["message"].replace(w.ids["tenant_a"], str(UUID(int=7)))) == \
            (missing["code"], missing["message"])
    removed = w.call("tenant_admin", "DELETE", registry, 200)
    w.call("tenant_admin", "GET", registry, 404)
    with database.transaction() as conn:
        assert conn.execute("SELECT password_sealed FROM tenant_registries").fetchone()["password_sealed"] is None
    no_password(created.text, listed.text, shown.text, rotated.text, removed.text, audit_rows(database))
    assert [r["action"] for r in json.loads(audit_rows(database))] == [
        "registries.allowlist.add", "registries.tenant.create", "registries.tenant.rotate", "registries.tenant.delete"]


def private_app(w: World, actor: str, tenant: str, slug: str) -> None:
    w.call(actor, "POST", "/v1/catalog/apps", 201, json={
        "slug": slug, "display_name": slug, "runtime_backend": "oci", "tenant_id": w.ids[tenant]})


def artifact(w: World, actor: str, slug: str, kind: str, reference: str, expect: int = 201):
    created = w.call(actor, "POST", f"/v1/catalog/apps/{slug}/artifacts", expect,
                     json={"kind": kind, "reference": reference})
    if expect == 201:
        for to in ("staged", "canary", "active"):
            w.call(actor, "POST", f"/v1/catalog/artifacts/{created.json()['id']}/transitions", 200,
                   json={"to": to, "reason": "tests"})
    return created


def version(w: World, actor: str, slug: str, image: dict) -> None:
    controller = artifact(w, actor, slug, "controller", f"registry.example.com/{slug}/playbooks:1@{DIGEST}").json()
    w.call(actor, "POST", f"/v1/catalog/apps/{slug}/versions", 201, json={
        "version": "1.0", "artifact_id": controller["id"], "workload_artifact_id": image["id"],
        "adapter": PULL_ADAPTER})
    w.call(actor, "POST", f"/v1/catalog/apps/{slug}/versions/1.0/transitions", 200,
           json={"to": "active", "reason": "tests"})


def instance(w: World, actor: str, project: str, slug: str) -> dict:
    w.call(actor, "POST", f"/v1/projects/{w.ids[project]}/entitlements", 201, json={"app_slug": slug})
    allocation = register_allocation(w, project, f"alloc-{slug}", hosts=1)["id"]
    return w.call(actor, "POST", f"/v1/projects/{w.ids[project]}/instances", 201, json={
        "name": f"run-{slug}", "app_slug": slug, "allocation_ids": [allocation],
        "topology": [{"role": "replica", "count": 1}]}).json()


def run_plan(w: World, database, actor: str, inst: dict) -> planner.RunPlan:
    """The plan of the instance's deploy (queued once; each call plans it as a worker starting it would)."""
    if "deploy" not in inst:
        inst["deploy"] = w.call(actor, "POST", f"/v1/instances/{inst['id']}/deploy", 202).json()["id"]
    with database.transaction() as conn:
        return planner.build(conn, w.settings, {"id": UUID(inst["deploy"]), "kind": "deploy", "params": {},
                                                "member_ids": []}, instances.get_instance(conn, UUID(inst["id"])))


def test_only_the_tenants_private_apps_pin_its_images_and_only_its_runs_pull_with_them(w, database):
    allow(w)
    # Before tenant A registers the host, tenant B's private app pins an image there, and so does a platform app.
    private_app(w, "other_tenant_admin", "tenant_b", "tenant-b-web")
    b_image = artifact(w, "other_tenant_admin", "tenant-b-web", "oci", IMAGE).json()
    version(w, "other_tenant_admin", "tenant-b-web", b_image)
    w.call("platform_admin", "POST", "/v1/catalog/apps", 201,
           json={"slug": "web", "display_name": "Web", "runtime_backend": "oci"})
    platform_image = artifact(w, "platform_admin", "web", "oci", IMAGE).json()
    version(w, "platform_admin", "web", platform_image)
    register(w)

    # Registering images of the host stays open to everyone after tenant A registered it: a refusal would tell who
    # registered which host, and let a tenant close a shared host to the platform's apps. Only the credentials are A's.
    artifact(w, "platform_admin", "web", "oci", f"{HOST}/acme/other@sha256:{'ef' * 32}")
    artifact(w, "other_tenant_admin", "tenant-b-web", "oci", f"{HOST}/acme/x@sha256:{'ef' * 32}")
    private_app(w, "tenant_admin", "tenant_a", "tenant-a-web")
    version(w, "tenant_admin", "tenant-a-web", artifact(w, "tenant_admin", "tenant-a-web", "oci", IMAGE).json())

    # Tenant A's run of its private app pulls with the registry's credentials, as a secret variable (masked).
    mine = instance(w, "tenant_admin", "project_a1", "tenant-a-web")
    run = run_plan(w, database, "tenant_admin", mine)
    assert run.secret_vars[PULL] == {"registry": HOST, "username": "puller", "password": PASSWORD}
    assert PULL not in run.extravars and PASSWORD in run.secret_strings
    events = w.call("tenant_admin", "GET", f"/v1/instances/{mine['id']}/events?limit=200", 200)
    (issued,) = [e for e in events.json()["items"] if e["type"] == "tenant_registry.credential_issued"]
    assert (issued["payload"]["registry"], issued["payload"]["username"]) == (HOST, "puller")
    no_password(events.text, audit_rows(database))

    # Tenant B's run of its app pinned there, and tenant A's run of a platform app pinned there, get nothing of it.
    theirs = instance(w, "other_tenant_admin", "project_b1", "tenant-b-web")
    assert PULL not in run_plan(w, database, "other_tenant_admin", theirs).secret_vars
    w.call("platform_admin", "POST", f"/v1/projects/{w.ids['project_a2']}/entitlements", 201, json={"app_slug": "web"})
    allocation = register_allocation(w, "project_a2", "alloc-web-a2", hosts=1)["id"]
    platform_run = w.call("other_project_admin", "POST", f"/v1/projects/{w.ids['project_a2']}/instances", 201, json={
        "name": "platform-web", "app_slug": "web", "allocation_ids": [allocation],
        "topology": [{"role": "replica", "count": 1}]}).json()
    assert PULL not in run_plan(w, database, "other_project_admin", platform_run).secret_vars

    # Off the allowlist, or removed: the run fails before it starts, saying why.
    w.call("platform_admin", "DELETE", f"/v1/registries/allowlist/{HOST}", 200)
    with pytest.raises(ApiError) as off:
        run_plan(w, database, "tenant_admin", mine)
    assert off.value.code == "tenant_registry_unavailable" and "no longer on the platform's registry allowlist" in \
        off.value.message
    allow(w)
    assert run_plan(w, database, "tenant_admin", mine).secret_vars[PULL]["password"] == PASSWORD
    (registry,) = w.call("tenant_admin", "GET", f"/v1/tenants/{w.ids['tenant_a']}/registries", 200).json()["items"]
    w.call("tenant_admin", "DELETE", f"/v1/tenants/{w.ids['tenant_a']}/registries/{registry['id']}", 200)
    with pytest.raises(ApiError) as removed:
        run_plan(w, database, "tenant_admin", mine)
    assert removed.value.code == "tenant_registry_unavailable" and "which was removed" in removed.value.message

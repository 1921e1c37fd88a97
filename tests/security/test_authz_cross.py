"""The authorization run: every route, probed by every caller with another tenant's ids (tenant B,
project B1) and with another project's ids (project A2, same tenant). A probe gets through when a
route that names a tenant's data answers 2xx, and leaks when any answer holds an id or name of the
foreign side that the request itself did not name (owner ids included). Both must stay at zero, as
must 5xx. The run prints how many probes it made."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from api.conftest import shared  # noqa: F401 - the module-scoped world on its own database
from api.test_authz_matrix import ssh_public_key
from api.world import ACTORS, DIGEST, SLURM_ADAPTER, SLURM_COMPAT, create_instance, register_allocation
from gpuaas_api import db as dbmod
from gpuaas_api.app import create_app

_seq = itertools.count()
# Path parameters that name something a tenant owns; catalog parameters (slug, version, artifact_id) do so only on the
# tenant side, where they name tenant B's private app (PRIVATE_PARAMS).
PRIVATE_PARAMS = {"slug", "artifact_id"}
SCOPED_PARAMS = {"tenant_id", "project_id", "user_id", "token_id", "sa_id", "binding_id", "instance_id",
                 "member_id", "operation_id", "allocation_id", "overlay_id", "key_id", "grant_id", "registry_id"}
# Routes that take the tenant's ids in the query or body instead of the path.
SCOPED_ROUTES = {("POST", "/v1/role-bindings"), ("GET", "/v1/role-bindings"), ("POST", "/v1/policy/overlays"),
                 ("GET", "/v1/policy/overlays"), ("GET", "/v1/audit"), ("POST", "/v1/allocations"),
                 ("POST", "/v1/catalog/apps"), ("POST", "/v1/catalog/apps/{slug}/versions/{version}/gates")}
BREAK_GLASS = {"X-Break-Glass-Reason": "authorization probe run"}


def _request(method: str, path: str, t: dict) -> tuple[str, dict]:
    """The URL and request kwargs of one probe of route (method, path) aimed at targets `t`."""
    url = re.sub(r"{(\w+)}", lambda m: str(t[m.group(1)]), path)
    n = next(_seq)
    bodies = {
        ("POST", "/v1/me/tokens"): {"name": "probe"},
        ("POST", "/v1/tenants"): {"name": f"probe-{n}"},
        ("POST", "/v1/tenants/{tenant_id}/projects"): {"name": f"probe-{n}"},
        ("POST", "/v1/tenants/{tenant_id}/users"): {"email": f"probe{n}@example.com"},
        ("POST", "/v1/users/{user_id}/tokens"): {"name": "probe"},
        ("POST", "/v1/projects/{project_id}/service-accounts"): {"name": f"probe-{n}", "roles": ["sa_viewer"]},
        ("POST", "/v1/projects/{project_id}/service-accounts/{sa_id}/tokens"): {"name": "probe"},
        ("POST", "/v1/role-bindings"): {"principal_kind": "user", "principal_id": t["user_id"],
                                        "role": "project_member", "project_id": t["project_id"]},
        ("POST", "/v1/projects/{project_id}/entitlements"): {"app_slug": "slurm"},
        ("POST", "/v1/catalog/apps"): {"slug": f"probe-{n}", "display_name": "probe", "runtime_backend": "oci",
                                       "tenant_id": t["tenant_id"]},
        ("POST", "/v1/catalog/apps/{slug}/artifacts"): {"kind": "oci", "reference": f"probe.example.com/p@{DIGEST}"},
        ("POST", "/v1/catalog/apps/{slug}/versions"): {"version": f"9.{n}.0", "artifact_id": t["artifact_id"],
                                                       "compatibility": SLURM_COMPAT, "adapter": SLURM_ADAPTER},
        ("POST", "/v1/catalog/artifacts/{artifact_id}/transitions"): {"to": "deprecated", "reason": "probe"},
        ("POST", "/v1/catalog/artifacts/{artifact_id}/gates"): {"kind": "staging", "reason": "probe"},
        ("POST", "/v1/catalog/apps/{slug}/versions/{version}/transitions"): {"to": "deprecated", "reason": "probe"},
        ("POST", "/v1/catalog/apps/{slug}/versions/{version}/gates"): {
            "kind": "smoke", "project_id": t["project_id"], "allocation_ids": [t["allocation_id"]], "reason": "probe"},
        ("POST", "/v1/policy/overlays"): {"scope_kind": "project", "project_id": t["project_id"],
                                          "dimension": "region", "effect": "deny", "values": ["x"]},
        ("POST", "/v1/allocations"): {"project_id": t["project_id"], "name": f"probe-{n}",
                                      "capacity_shape": "gpu_slice", "gpu_count": 1, "region": "eu-west-1",
                                      "hosts": [{"name": "h0", "address": f"10.99.{n // 250}.{n % 250}"}]},
        ("POST", "/v1/projects/{project_id}/instances"): {"name": f"probe-{n}", "app_slug": "slurm",
                                                          "allocation_ids": [t["allocation_id"]]},
        ("PATCH", "/v1/instances/{instance_id}"): {"labels": {"probe": "yes"}},
        ("POST", "/v1/instances/{instance_id}/upgrade"): {"app_version_id": t["version_id"]},
        ("POST", "/v1/instances/{instance_id}/members"): {"role": "worker", "allocation_id": t["allocation_id"]},
        ("POST", "/v1/instances/{instance_id}/members/{member_id}/replace"): {"allocation_id": t["allocation_id"]},
        ("POST", "/v1/admin/instances/{instance_id}/transitions"): {"to": "failed", "reason": "probe"},
        ("POST", "/v1/instances/{instance_id}/attachments"): {"project_id": t["project_id"], "reason": "probe"},
        ("POST", "/v1/instances/{instance_id}/attachments/{project_id}/detach"): {"reason": "probe"},
        ("POST", "/v1/registries/allowlist"): {"host": f"probe-{n}.example.com"},
        ("POST", "/v1/tenants/{tenant_id}/registries"): {"name": f"probe-{n}", "host": t["host"], "username": "u",
                                                     "password": "p"},
        ("PUT", "/v1/tenants/{tenant_id}/registries/{registry_id}/credentials"): {"username": "u", "password": "p"},
        ("POST", "/v1/instances/{instance_id}/submit-grants"): {
            "principal_kind": "service_account", "principal_id": t["sa_id"], "target_project_id": t["project_id"],
            "reason": "probe"},
    }
    params = {
        "/v1/role-bindings": {"project_id": t["project_id"]},
        "/v1/policy/overlays": {"scope_kind": "project", "project_id": t["project_id"]},
        "/v1/audit": {"project_id": t["project_id"]},
        "/v1/instances/{instance_id}/events/stream": {"max_seconds": 1},
        "/v1/projects/{project_id}/usage": {"start": "2026-01-01", "end": "2026-02-01"},
        "/v1/tenants/{tenant_id}/usage": {"start": "2026-01-01", "end": "2026-02-01"},
    }
    kwargs: dict = {"headers": dict(BREAK_GLASS) if path.startswith("/v1/admin/") else {}}
    if (method, path) in bodies:
        kwargs["json"] = bodies[(method, path)]
    if method == "GET" and path in params:
        kwargs["params"] = params[path]
    return url, kwargs


def _targets(w, database, side: str) -> tuple[dict, set[str]]:
    """The foreign side's ids (and the names it holds) for probes; built through the API as its own
    admins would."""
    pa = "platform_admin"
    grant = "6f1c5a43-9d2e-4b8a-8e1f-3c2d1b0a9f87"  # no shared runtime on the other project's side
    version = w.call(pa, "GET", "/v1/catalog/apps/slurm/versions/1.0.0", 200).json()
    app, artifact, private = "slurm", version["artifact_id"], set()
    if side == "tenant":
        # Tenant B's private app (its admin publishes it): the catalog routes are probed on it.
        app, admin = "tenant-b-private", "other_tenant_admin"
        w.call(admin, "POST", "/v1/catalog/apps", 201, json={"slug": app, "display_name": "tenant-b-secret-app",
                                                             "runtime_backend": "oci", "tenant_id": w.ids["tenant_b"]})
        artifact = w.call(admin, "POST", f"/v1/catalog/apps/{app}/artifacts", 201, json={
            "kind": "oci", "reference": f"registry.example.com/tenant-b-secret-repo@{DIGEST}"}).json()["id"]
        for target in ("staged", "canary", "active"):
            w.call(admin, "POST", f"/v1/catalog/artifacts/{artifact}/transitions", 200,
                   json={"to": target, "reason": "b"})
        own = w.call(admin, "POST", f"/v1/catalog/apps/{app}/versions", 201, json={
            "version": "1.0.0", "artifact_id": artifact, "compatibility": SLURM_COMPAT,
            "adapter": SLURM_ADAPTER}).json()
        private = {app, artifact, own["id"], "tenant-b-secret-app", "tenant-b-secret-repo"}
        # Tenant B's instance is its shared runtime, with a second project attached and a real grant: every
        # tenant-shared route is probed on one that exists.
        admin, tenant, project, alloc = "other_tenant_admin", "tenant_b", "project_b1", "alloc_b1"
        b2 = w.call(admin, "POST", f"/v1/tenants/{w.ids[tenant]}/projects", 201, json={"name": "b-two"}).json()["id"]
        w.call(pa, "POST", f"/v1/projects/{b2}/entitlements", 201, json={"app_slug": "slurm"})
        instance = create_instance(w, admin, project, "slurm-b1", alloc, control_plane_scope="tenant",
                                   attachable_project_ids=[b2])["id"]
        w.call(admin, "POST", f"/v1/instances/{instance}/attachments", 201, json={"project_id": b2, "reason": "b"})
        user = w.ids["user_other_tenant_admin"]
        sa = w.call(admin, "POST", f"/v1/projects/{w.ids[project]}/service-accounts", 201,
                    json={"name": "b-operator"}).json()["id"]
        grant = w.call(admin, "POST", f"/v1/instances/{instance}/submit-grants", 201, json={
            "principal_kind": "service_account", "principal_id": sa, "target_project_id": b2,
            "reason": "b"}).json()["id"]
    else:
        admin, tenant, project, alloc = "other_project_admin", "tenant_a", "project_a2", "alloc_a2"
        instance, user, sa = w.ids["instance_a2"], w.ids["user_other_project_admin"], w.ids["sa_other_service_account"]
    operation = w.call(admin, "POST", f"/v1/instances/{instance}/deploy", 202).json()["id"]
    member = w.call(admin, "GET", f"/v1/instances/{instance}/members", 200).json()["items"][0]["id"]
    overlay = w.call(admin, "POST", "/v1/policy/overlays", 201, json={
        "scope_kind": "project", "project_id": w.ids[project], "dimension": "sku", "effect": "deny",
        "values": [f"{side}-secret-sku"]}).json()["id"]
    bindings = w.call(pa, "GET", "/v1/role-bindings", 200, params={"tenant_id": w.ids[tenant]}).json()["items"]
    binding = next(b["id"] for b in bindings if b["principal_id"] == user)
    with database.transaction() as conn:
        token = conn.execute("SELECT id FROM api_tokens WHERE principal_id = %s LIMIT 1", (user,)).fetchone()["id"]
    key = w.call(admin, "POST", "/v1/me/ssh-keys", 201, json={"name": f"{side}-key", "public_key": ssh_public_key()})
    # The side's tenant's private registry (its tenant admin's) on a host the platform allowlisted.
    host = f"{side}-registry.example.com:5000"
    w.call(pa, "POST", "/v1/registries/allowlist", 201, json={"host": host})
    registry = w.call("other_tenant_admin" if side == "tenant" else "tenant_admin", "POST",
                      f"/v1/tenants/{w.ids[tenant]}/registries", 201, json={
                          "name": f"{side}-secret-registry", "host": host, "username": f"{side}-secret-user",
                          "password": "p"}).json()["id"]
    # A smoke gate run in the side's project (catalog/smoke.py): what it ran is the project's, though the app (tenant
    # B's private one; the platform's slurm on the project side) is seen by others too.
    smoke_alloc = register_allocation(w, project, f"{side}-smoke", hosts=2)["id"]
    if side == "tenant":
        w.call(admin, "POST", f"/v1/projects/{w.ids[project]}/entitlements", 201, json={"app_slug": app})
        publisher, smoke_version = admin, "1.0.0"
    else:
        smoke_version, publisher = "2.5.0", "side_publisher"
        w.call(pa, "POST", f"/v1/catalog/apps/{app}/versions", 201, json={
            "version": smoke_version, "artifact_id": artifact, "compatibility": SLURM_COMPAT, "adapter": SLURM_ADAPTER})
        dev = w.call(pa, "POST", f"/v1/tenants/{w.ids[tenant]}/users", 201, json={"email": "dev@a2.example"}).json()
        for binding in ({"role": "catalog_publisher"}, {"role": "project_admin", "project_id": w.ids[project]}):
            w.call(pa, "POST", "/v1/role-bindings", 201, json={"principal_kind": "user", "principal_id": dev["id"]}
                   | binding)
        w.tokens[publisher] = w.call(pa, "POST", f"/v1/users/{dev['id']}/tokens", 201,
                                     json={"name": "smoke"}).json()["token"]
    gate = w.call(publisher, "POST", f"/v1/catalog/apps/{app}/versions/{smoke_version}/gates", 202, json={
        "kind": "smoke", "project_id": w.ids[project], "allocation_ids": [smoke_alloc],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}], "reason": "side"}).json()
    private |= {smoke_alloc, gate["smoke"]["instance_id"], gate["smoke"]["instance_name"],
                gate["smoke"]["operations"][0]["id"], str(gate["requested_by"])}
    t = {"tenant_id": w.ids[tenant], "project_id": w.ids[project], "user_id": user, "token_id": token, "sa_id": sa,
         "binding_id": binding, "instance_id": instance, "member_id": member, "operation_id": operation,
         "allocation_id": w.ids[alloc], "overlay_id": overlay, "slug": app, "app_slug": "slurm",
         "version": "1.0.0", "version_id": version["id"], "artifact_id": artifact,
         "digest": "sha256:" + "ab" * 32, "name": "admin", "job_id": "4711", "key_id": key.json()["id"],
         "grant_id": grant, "registry_id": registry, "host": host, "gate_id": gate["id"]}
    secrets = {str(t[k]) for k in SCOPED_PARAMS if k != "tenant_id" or side == "tenant"}
    for path in (f"/v1/instances/{instance}", f"/v1/users/{user}"):
        body = w.call(pa if "users" in path else admin, "GET", path, 200).json()
        secrets |= {body.get("name") or body["email"]}
    return t, secrets | {f"{side}-secret-sku", f"{side}-secret-registry", f"{side}-secret-user"} | private


# Who is foreign to each side: everyone who holds no binding over it.
CALLERS = {"tenant": [a for a in ACTORS if a not in ("platform_admin", "other_tenant_admin")],
           "project": ["anonymous", "project_admin", "project_member", "service_account", "other_tenant_admin"]}


@pytest.mark.parametrize("side", ["tenant", "project"])
def test_foreign_ids_never_get_through(shared, side, capsys, record_property):  # noqa: F811
    w = shared.world
    t, secrets = _targets(w, shared.database, side)
    routes = [(m.upper(), p) for p, ops in create_app(dbmod.Database("dbname=unused")).openapi()["paths"].items()
              for m in ops]
    probes, through, server_errors = 0, [], []
    for (method, path), actor in itertools.product(routes, CALLERS[side]):
        url, kwargs = _request(method, path, t)
        response = w.call(actor, method, url, **kwargs)
        probes += 1
        params = set(re.findall(r"{(\w+)}", path))
        scoped = (bool(SCOPED_PARAMS & params) or (method, path) in SCOPED_ROUTES
                  or (side == "tenant" and bool(PRIVATE_PARAMS & params)))
        asked = url + json.dumps(kwargs)
        leaked = [s for s in secrets if s in response.text and s not in asked]
        if response.status_code >= 500:
            server_errors.append((actor, method, path, response.status_code))
        if leaked or (scoped and response.is_success):
            through.append((actor, method, path, response.status_code, leaked, response.text[:300]))
    record_property(f"authz_probes_{side}", probes)
    record_property(f"authz_through_{side}", len(through))
    with capsys.disabled():
        print(f"\nauthorization run, another {side}'s ids: {probes} probes over {len(routes)} routes, "
              f"{len(through)} got through, {len(server_errors)} 5xx")
    assert probes >= len(routes) * len(CALLERS[side])
    assert not server_errors, server_errors
    assert not through, through

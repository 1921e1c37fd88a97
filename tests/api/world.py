"""A small world built through the real API: two tenants, three projects, one actor of every kind
the authorization matrix needs, a Slurm app with an active artifact and version, entitlements,
allocations and an instance per project."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from gpuaas_api.catalog.adapter import AppDescriptor
from gpuaas_api.iam.service import bootstrap_platform_admin

DIGEST = "sha256:" + "ab" * 32
# The Slurm app's adapter spec, as the collection ships it.
SLURM_ADAPTER = AppDescriptor.model_validate(yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "adapters" / "slurm.yml").read_text())).spec().model_dump(mode="json")
SLURM_COMPAT = {"requires_capacity_shape": ["baremetal", "gpu_slice"], "min_gpu_count": 1,
                "requires_exclusive_node": False, "multi_node": True}

ACTORS = ["anonymous", "platform_admin", "tenant_admin", "other_tenant_admin", "project_admin",
          "other_project_admin", "project_member", "other_project_member", "service_account",
          "other_service_account"]


@dataclass
class World:
    client: Any
    tokens: dict[str, str | None] = field(default_factory=dict)
    ids: dict[str, Any] = field(default_factory=dict)
    allocations: int = 0  # registered so far: each allocation gets its own addresses (hosts are exclusive)

    def headers(self, actor: str, **extra: str) -> dict[str, str]:
        token = self.tokens.get(actor)
        return ({"Authorization": f"Bearer {token}"} if token else {}) | extra

    def call(self, actor: str, method: str, url: str, expect: int | None = None, **kwargs):
        headers = self.headers(actor) | kwargs.pop("headers", {})
        response = self.client.request(method, url, headers=headers, **kwargs)
        if expect is not None:
            assert response.status_code == expect, (method, url, actor, response.status_code, response.text)
        return response


def publish_app(w: World, slug: str = "slurm", version: str = "1.0.0", *, compat: dict | None = None,
                adapter: dict | None = None, reference: str | None = None, runtime_backend: str = "slurm",
                operating_modes: list[str] | None = None) -> dict:
    """Register an app with an artifact promoted to active and an active version (as platform admin)."""
    if w.client.get(f"/v1/catalog/apps/{slug}", headers=w.headers("platform_admin")).status_code == 404:
        w.call("platform_admin", "POST", "/v1/catalog/apps", 201, json={
            "slug": slug, "display_name": slug.title(), "runtime_backend": runtime_backend,
            "operating_modes": operating_modes or ["tenant_dedicated", "platform_managed"]})
    artifact = w.call("platform_admin", "POST", f"/v1/catalog/apps/{slug}/artifacts", 201, json={
        "kind": "controller",
        "reference": reference or f"registry.example.com/gpuaas/{slug}:{version}@{DIGEST}"}).json()
    for target in ("staged", "canary", "active"):
        w.call("platform_admin", "POST", f"/v1/catalog/artifacts/{artifact['id']}/transitions", 200,
               json={"to": target, "reason": "promotion in tests"})
    w.call("platform_admin", "POST", f"/v1/catalog/apps/{slug}/versions", 201, json={
        "version": version, "artifact_id": artifact["id"], "compatibility": compat or SLURM_COMPAT,
        "runtime_profile": {"slurm_version": "22.05"}, "adapter": adapter or SLURM_ADAPTER})
    return w.call("platform_admin", "POST", f"/v1/catalog/apps/{slug}/versions/{version}/transitions", 200,
                  json={"to": "active", "reason": "publish", "skip_gates": True}).json()


def register_allocation(w: World, project: str, name: str, *, shape: str = "baremetal", gpus: int = 8,
                        region: str = "eu-west-1", hosts: int = 3, sku: str | None = "h100-8x",
                        exclusive: bool | None = None) -> dict:
    body = {"project_id": w.ids[project], "name": name, "capacity_shape": shape, "gpu_count": gpus,
            "region": region, "sku": sku,
            "hosts": [{"name": f"{name}-h{i}", "address": f"10.77.{w.allocations}.{i + 10}", "ssh_user": "root"}
                      for i in range(hosts)]}
    w.allocations += 1
    if exclusive is not None:
        body["exclusive"] = exclusive
    return w.call("platform_admin", "POST", "/v1/allocations", 201, json=body).json()


def create_instance(w: World, actor: str, project: str, name: str, allocation: str, workers: int = 2,
                    **extra) -> dict:
    body = {"name": name, "app_slug": "slurm", "allocation_ids": [w.ids[allocation]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": workers}]} | extra
    return w.call(actor, "POST", f"/v1/projects/{w.ids[project]}/instances", 201, json=body).json()


def build_world(client, database) -> World:
    w = World(client=client)
    w.tokens["anonymous"] = None
    with database.transaction() as conn:
        w.tokens["platform_admin"] = bootstrap_platform_admin(conn, "root@platform.example", 1)
    pa = "platform_admin"
    for t in ("a", "b"):
        w.ids[f"tenant_{t}"] = w.call(pa, "POST", "/v1/tenants", 201, json={"name": f"tenant-{t}"}).json()["id"]
    for key, tenant in (("project_a1", "tenant_a"), ("project_a2", "tenant_a"), ("project_b1", "tenant_b")):
        w.ids[key] = w.call(pa, "POST", f"/v1/tenants/{w.ids[tenant]}/projects", 201,
                            json={"name": key.replace("_", "-")}).json()["id"]

    people = [  # actor, tenant, role, scope (tenant_id or project_id key)
        ("tenant_admin", "tenant_a", "tenant_admin", ("tenant_id", "tenant_a")),
        ("other_tenant_admin", "tenant_b", "tenant_admin", ("tenant_id", "tenant_b")),
        ("project_admin", "tenant_a", "project_admin", ("project_id", "project_a1")),
        ("other_project_admin", "tenant_a", "project_admin", ("project_id", "project_a2")),
        ("project_member", "tenant_a", "project_member", ("project_id", "project_a1")),
        ("other_project_member", "tenant_a", "project_member", ("project_id", "project_a2")),
    ]
    for actor, tenant, role, (scope_key, scope_ref) in people:
        user = w.call(pa, "POST", f"/v1/tenants/{w.ids[tenant]}/users", 201,
                      json={"email": f"{actor.replace('_', '.')}@example.com"}).json()
        w.ids[f"user_{actor}"] = user["id"]
        w.call(pa, "POST", "/v1/role-bindings", 201, json={
            "principal_kind": "user", "principal_id": user["id"], "role": role, scope_key: w.ids[scope_ref]})
        w.tokens[actor] = w.call(pa, "POST", f"/v1/users/{user['id']}/tokens", 201,
                                 json={"name": "tests"}).json()["token"]

    for actor, admin, project in (("service_account", "project_admin", "project_a1"),
                                  ("other_service_account", "other_project_admin", "project_a2")):
        sa = w.call(admin, "POST", f"/v1/projects/{w.ids[project]}/service-accounts", 201,
                    json={"name": "operator"}).json()
        w.ids[f"sa_{actor}"] = sa["id"]
        w.tokens[actor] = w.call(admin, "POST", f"/v1/projects/{w.ids[project]}/service-accounts/{sa['id']}/tokens",
                                 201, json={"name": "automation"}).json()["token"]

    publish_app(w)
    for project in ("project_a1", "project_a2", "project_b1"):
        w.call(pa, "POST", f"/v1/projects/{w.ids[project]}/entitlements", 201, json={"app_slug": "slurm"})
    w.ids["alloc_a1"] = register_allocation(w, "project_a1", "alloc-a1")["id"]
    w.ids["alloc_a2"] = register_allocation(w, "project_a2", "alloc-a2")["id"]
    w.ids["alloc_b1"] = register_allocation(w, "project_b1", "alloc-b1")["id"]
    w.ids["instance_a1"] = create_instance(w, "project_admin", "project_a1", "slurm-a1", "alloc_a1")["id"]
    w.ids["instance_a2"] = create_instance(w, "other_project_admin", "project_a2", "slurm-a2", "alloc_a2")["id"]
    return w

"""Every route × every actor: anonymous; platform admin; tenant admin of this and of another tenant;
project admin, project member and service account of this and of another project. Targets live in
tenant A / project A1; the "other" project is A2 (same tenant), the other tenant is B. An allowed call
must succeed (2xx); a denied call must be 401 (anonymous), 403 for a caller who can see the target's
tenant or project, or, for one who cannot, the same 404 as for a missing id — never a 5xx."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gpuaas_api import db as dbmod
from gpuaas_api.app import create_app
from gpuaas_api.config import OperationSettings
from gpuaas_api.content.store import embedded_store
from operations.helpers import (
    CREDENTIAL,
    TEST_APP,
    point_credential,
    publish_test_app,
    running_with_scheduler_key,
    use_local_connection,
)
from operations.toy_scheduler import ToyScheduler, point_at

from .world import ACTORS, DIGEST, SLURM_ADAPTER, SLURM_COMPAT, World, create_instance, register_allocation

AUTHENTICATED = set(ACTORS) - {"anonymous"}
EVERYONE = set(ACTORS)
PA, TA, PADM, PM, SA = "platform_admin", "tenant_admin", "project_admin", "project_member", "service_account"
PROJECT_READERS = {TA, PADM, PM, SA}  # apps.instance.read in project A1
PROJECT_USERS = {TA, PADM, PM, SA}  # scheduler.queue.* and scheduler.node.read in project A1
PEOPLE = AUTHENTICATED - {SA, "other_service_account"}  # users: their own SSH keys
PUBLISHERS = {PA, TA, "other_tenant_admin"}  # apps.content.upload: the platform's and each tenant's admins
USAGE_WINDOW = {"start": "2026-01-01", "end": "2026-02-01T00:00:00Z"}
_seq = itertools.count()


def uniq(prefix: str) -> str:
    return f"{prefix}-{next(_seq)}"


def ssh_public_key() -> str:
    key = Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode() + " t@x"


@dataclass
class Ctx:
    w: World
    database: dbmod.Database
    files: Path  # where the test app's credential module reads its secret
    settings: OperationSettings
    toy: ToyScheduler | None = None  # the scheduler of scheduler_instance()
    shared_toy: ToyScheduler | None = None  # the scheduler of shared_instance()

    @property
    def ids(self):
        return self.w.ids

    def sql(self, query: str, params=()) -> dict | None:
        with self.database.transaction() as conn:
            return conn.execute(query, params).fetchone()

    def fresh_user(self) -> str:
        return str(self.sql("INSERT INTO users (tenant_id, email, display_name) VALUES (%s, %s, 'x') RETURNING id",
                            (self.ids["tenant_a"], f"{uniq('u')}@example.com"))["id"])

    def fresh_binding(self) -> str:
        return str(self.sql(
            """INSERT INTO role_bindings (principal_kind, principal_id, role, scope_kind, tenant_id, project_id)
               VALUES ('user', %s, 'project_member', 'project', %s, %s) RETURNING id""",
            (self.fresh_user(), self.ids["tenant_a"], self.ids["project_a1"]))["id"])

    def fresh_sa(self) -> str:
        return str(self.sql("""INSERT INTO service_accounts (tenant_id, project_id, name) VALUES (%s, %s, %s)
                               RETURNING id""", (self.ids["tenant_a"], self.ids["project_a1"], uniq("sa")))["id"])

    def fresh_content(self) -> tuple[str, bytes]:
        data = uniq("collection build").encode()
        return "sha256:" + hashlib.sha256(data).hexdigest(), data

    def stored_content(self) -> str:
        digest, data = self.fresh_content()
        self.w.call(PA, "PUT", f"/v1/content/{digest}", 201, content=data)
        return digest

    def fresh_app(self) -> str:
        slug = uniq("app")
        self.sql("""INSERT INTO app_manifests (slug, display_name, runtime_backend, operating_modes)
                    VALUES (%s, %s, 'oci', '{tenant_dedicated}') RETURNING slug""", (slug, slug))
        return slug

    def fresh_artifact(self) -> str:
        return self.w.call(PA, "POST", "/v1/catalog/apps/slurm/artifacts", 201, json={
            "kind": "oci", "reference": f"registry.example.com/x/{uniq('a')}@{DIGEST}"}).json()["id"]

    def private_app(self) -> str:
        """Tenant A's private app, published by its tenant admin (who holds the publisher keys in its tenant):
        a collection build, its artifact and version active, project A1 entitled by the tenant admin."""
        if "private_app" not in self.ids:
            slug, (digest, data) = "tenant-a-matrix", self.fresh_content()
            self.w.call(TA, "PUT", f"/v1/content/{digest}", 201, content=data)
            self.w.call(TA, "POST", "/v1/catalog/apps", 201, json={
                "slug": slug, "display_name": "Private", "runtime_backend": "bare_metal",
                "tenant_id": self.ids["tenant_a"]})
            artifact = self.w.call(TA, "POST", f"/v1/catalog/apps/{slug}/artifacts", 201, json={
                "kind": "collection", "reference": f"collections/a.matrix:1.0.0@{digest}"}).json()["id"]
            # Its build is stand-in bytes: promoted while the operator names no staging checks.
            app, settings = self.w.client.app, self.w.client.app.state.settings
            app.state.settings = dataclasses.replace(settings, promotion_staging_checks=())
            try:
                for target in ("staged", "canary", "active"):
                    self.w.call(TA, "POST", f"/v1/catalog/artifacts/{artifact}/transitions", 200,
                                json={"to": target, "reason": "matrix"})
            finally:
                app.state.settings = settings
            self.w.call(TA, "POST", f"/v1/catalog/apps/{slug}/versions", 201, json={
                "version": "1.0.0", "artifact_id": artifact, "compatibility": SLURM_COMPAT, "adapter": SLURM_ADAPTER})
            self.w.call(TA, "POST", f"/v1/catalog/apps/{slug}/versions/1.0.0/transitions", 200,
                        json={"to": "active", "reason": "matrix"})
            self.w.call(TA, "POST", f"/v1/projects/{self.ids['project_a1']}/entitlements", 201,
                        json={"app_slug": slug})
            self.ids["private_app"], self.ids["private_artifact"] = slug, artifact
        return self.ids["private_app"]

    def private_artifact(self) -> str:
        self.private_app()
        return self.ids["private_artifact"]

    def fresh_private_app(self) -> str:
        slug = uniq("tenant-a-app")
        self.sql("""INSERT INTO app_manifests (slug, display_name, runtime_backend, operating_modes, tenant_id)
                    VALUES (%s, %s, 'oci', '{tenant_dedicated}', %s) RETURNING slug""",
                 (slug, slug, self.ids["tenant_a"]))
        return slug

    def fresh_private_artifact(self) -> str:
        return self.w.call(TA, "POST", f"/v1/catalog/apps/{self.private_app()}/artifacts", 201, json={
            "kind": "oci", "reference": f"registry.example.com/a/{uniq('a')}@{DIGEST}"}).json()["id"]

    def fresh_private_version(self) -> str:
        version = uniq("2.0")
        self.w.call(TA, "POST", f"/v1/catalog/apps/{self.private_app()}/versions", 201, json={
            "version": version, "artifact_id": self.private_artifact(), "compatibility": SLURM_COMPAT,
            "adapter": SLURM_ADAPTER})
        return version

    def fresh_version(self) -> str:
        version = uniq("2.0")
        self.w.call(PA, "POST", "/v1/catalog/apps/slurm/versions", 201, json={
            "version": version, "artifact_id": self.active_artifact(), "compatibility": SLURM_COMPAT,
            "adapter": SLURM_ADAPTER})
        return version

    def draft_collection(self, actor: str = PA, slug: str = "slurm") -> str:
        """A draft collection artifact of `slug` (its build stored by `actor`): what a staging gate checks."""
        digest, data = self.fresh_content()
        self.w.call(actor, "PUT", f"/v1/content/{digest}", 201, content=data)
        return self.w.call(actor, "POST", f"/v1/catalog/apps/{slug}/artifacts", 201, json={
            "kind": "collection", "reference": f"collections/a.matrix:1.0.0@{digest}"}).json()["id"]

    def staging_gate(self, private: bool = False) -> str:
        """A queued staging gate (no worker runs here) of the platform's slurm app, or of tenant A's private app."""
        key = "private_gate" if private else "gate"
        if key not in self.ids:
            actor, slug = (TA, self.private_app()) if private else (PA, "slurm")
            self.ids[key] = self.w.call(actor, "POST", f"/v1/catalog/artifacts/{self.draft_collection(actor, slug)}"
                                        "/gates", 202, json={"kind": "staging", "reason": "matrix"}).json()["id"]
        return self.ids[key]

    def active_artifact(self) -> str:
        return str(self.sql("SELECT id FROM artifacts WHERE status = 'active' LIMIT 1")["id"])

    def fresh_allocation(self) -> str:
        """Capacity of its own for each instance a case creates (a host serves one instance)."""
        name = uniq("alloc")
        self.ids[name] = register_allocation(self.w, "project_a1", name)["id"]
        return name

    def fresh_instance(self) -> str:
        # Two workers: removing one keeps the role's minimum (role_minimum).
        return create_instance(self.w, PADM, "project_a1", uniq("inst"), self.fresh_allocation(), workers=2)["id"]

    def fresh_user_token(self) -> str:
        return self.w.call(PA, "POST", f"/v1/users/{self.ids['user_project_member']}/tokens", 201,
                           json={"name": "t"}).json()["id"]

    def clear_overlay(self, dimension: str) -> str:
        self.sql("DELETE FROM policy_overlays WHERE project_id = %s AND dimension = %s RETURNING id",
                 (self.ids["project_a1"], dimension))
        return dimension

    def fresh_overlay(self, dimension: str) -> str:
        self.clear_overlay(dimension)
        return str(self.sql("""INSERT INTO policy_overlays (scope_kind, tenant_id, project_id, dimension, effect,
                                   "values") VALUES ('project', %s, %s, %s, 'deny', %s) RETURNING id""",
                            (self.ids["tenant_a"], self.ids["project_a1"], dimension, ["x"]))["id"])

    def running_instance(self, previous: bool = False) -> tuple[str, str]:
        """A fresh instance marked running with active members (operations only queue here; no worker
        runs them). Returns (instance id, a worker member id)."""
        iid = self.fresh_instance()
        self.sql("""UPDATE app_instances SET status = 'running',
                        previous_version_id = CASE WHEN %s THEN app_version_id END WHERE id = %s RETURNING id""",
                 (previous, iid))
        self.sql("UPDATE app_instance_members SET status = 'active' WHERE instance_id = %s RETURNING id", (iid,))
        member = self.sql("SELECT id FROM app_instance_members WHERE instance_id = %s AND role = 'worker'", (iid,))
        return iid, str(member["id"])

    def member_op(self, action: str, status: str = "active") -> str:
        iid, mid = self.running_instance()
        self.sql("UPDATE app_instance_members SET status = %s WHERE id = %s RETURNING id", (status, mid))
        return f"/v1/instances/{iid}/members/{mid}/{action}"

    def active_version_id(self) -> str:
        version = self.fresh_version()
        return self.w.call(PA, "POST", f"/v1/catalog/apps/slurm/versions/{version}/transitions", 200,
                           json={"to": "active", "reason": "publish"}).json()["id"]

    def queued_operation(self) -> str:
        op = self.w.call(PADM, "POST", f"/v1/instances/{self.fresh_instance()}/deploy", 202).json()["id"]
        self.sql("INSERT INTO operation_artifacts (operation_id, attempt, tarball) VALUES (%s, 1, %s) RETURNING 1",
                 (op, b"not really a tarball"))
        return op

    def credential_instance(self) -> str:
        """A running instance of the test app (tests/apps/opsapp, its build registered through the API) whose worker
        keeps the credential the app declares: an allowed call reads it for real, with a local connection."""
        if "credential_instance" not in self.ids:
            publish_test_app(self.w)
            self.w.call(PA, "POST", f"/v1/projects/{self.ids['project_a1']}/entitlements", 201,
                        json={"app_slug": TEST_APP})
            instance = self.w.call(PADM, "POST", f"/v1/projects/{self.ids['project_a1']}/instances", 201, json={
                "name": uniq("creds"), "app_slug": TEST_APP, "allocation_ids": [self.ids[self.fresh_allocation()]],
                "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]}).json()
            self.sql("UPDATE app_instances SET status = 'running' WHERE id = %s RETURNING id", (instance["id"],))
            self.sql("UPDATE app_instance_members SET status = 'active' WHERE instance_id = %s RETURNING id",
                     (instance["id"],))
            worker = self.sql("SELECT node_name FROM app_instance_members WHERE instance_id = %s AND role = 'worker'",
                              (instance["id"],))
            point_credential(self.sql, instance["app_version_id"], self.files)
            (self.files / f"{worker['node_name']}.secret").write_text("the matrix's secret")
            self.ids["credential_instance"] = instance["id"]
        return self.ids["credential_instance"]

    def scheduler_instance(self) -> str:
        """A running instance of the test app whose scheduler is the toy one (tests/operations/toy_scheduler.py),
        on loopback: an allowed call reaches a real gateway and gets its answer."""
        if self.toy is None:
            self.credential_instance()  # publishes and entitles the test app
            instance = self.w.call(PADM, "POST", f"/v1/projects/{self.ids['project_a1']}/instances", 201, json={
                "name": uniq("sched"), "app_slug": TEST_APP, "allocation_ids": [self.ids[self.fresh_allocation()]],
                "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 2}]}).json()
            key = running_with_scheduler_key(self, instance["id"])
            self.toy = ToyScheduler(key, instance["id"], nodes=["n1", "n2"]).__enter__()
            point_at(self.sql, instance["id"], self.toy.port)
            self.ids["scheduler_instance"] = instance["id"]
        return self.ids["scheduler_instance"]

    def shared_instance(self) -> str:
        """A running tenant-shared runtime of the test app, owned by project A1, whose scheduler is a toy one."""
        if self.shared_toy is None:
            self.scheduler_instance()  # publishes and entitles the test app
            instance = self.w.call(TA, "POST", f"/v1/projects/{self.ids['project_a1']}/instances", 201, json={
                "name": uniq("shared"), "app_slug": TEST_APP, "allocation_ids": [self.ids[self.fresh_allocation()]],
                "control_plane_scope": "tenant",
                "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]}).json()
            key = running_with_scheduler_key(self, instance["id"])
            self.shared_toy = ToyScheduler(key, instance["id"], nodes=["n1"]).__enter__()
            point_at(self.sql, instance["id"], self.shared_toy.port)
            self.ids["shared_instance"] = instance["id"]
        return self.ids["shared_instance"]

    def attachable_project(self) -> str:
        """A fresh project of tenant A, entitled to the test app and on the shared runtime's allowlist."""
        iid = self.shared_instance()
        project = self.w.call(TA, "POST", f"/v1/tenants/{self.ids['tenant_a']}/projects", 201,
                              json={"name": uniq("proj"), "display_name": "x"}).json()["id"]
        self.w.call(PA, "POST", f"/v1/projects/{project}/entitlements", 201, json={"app_slug": TEST_APP})
        self.sql("""UPDATE app_instances SET attachable_project_ids = attachable_project_ids || %s::uuid
                     WHERE id = %s RETURNING id""", (project, iid))
        return project

    def attached_project(self) -> str:
        project = self.attachable_project()
        self.sql("""INSERT INTO instance_attachments (instance_id, tenant_id, project_id, status)
                    VALUES (%s, %s, %s, 'attached') RETURNING id""",
                 (self.shared_instance(), self.ids["tenant_a"], project))
        return project

    def submit_grant(self) -> dict:
        """A grant for project A1's service account into a fresh attached project's account."""
        return {"principal_kind": "service_account", "principal_id": self.ids["sa_service_account"],
                "target_project_id": self.attached_project(), "reason": "matrix"}

    def live_grant(self) -> str:
        iid = self.shared_instance()
        grant = self.w.call(TA, "POST", f"/v1/instances/{iid}/submit-grants", 201, json=self.submit_grant()).json()
        return f"/v1/instances/{iid}/submit-grants/{grant['id']}"

    def job_path(self, action: str = "") -> str:
        """A job the project admin submitted to the toy scheduler."""
        iid = self.scheduler_instance()
        job = self.w.call(PADM, "POST", f"/v1/instances/{iid}/jobs", 201,
                          json={"name": "matrix", "script": "#!/bin/sh\ntrue\n"}).json()
        return f"/v1/instances/{iid}/jobs/{job['id']}{action}"

    def own_ssh_key(self, actor: str) -> str:
        """An SSH key of the actor, when it is a person (others get a made-up id: theirs is refused first)."""
        if actor in ("anonymous", SA, "other_service_account"):
            return str(uuid.uuid4())
        return self.w.call(actor, "POST", "/v1/me/ssh-keys", 201,
                           json={"name": uniq("k"), "public_key": ssh_public_key()}).json()["id"]

    def allowlisted_host(self) -> str:
        """A registry host new to the platform's allowlist (tenant-private registries)."""
        host = f"{uniq('registry')}.example.com:5000"
        self.w.call(PA, "POST", "/v1/registries/allowlist", 201, json={"host": host})
        return host

    def tenant_registry(self) -> str:
        """A new private registry of tenant A, registered by its tenant admin: its path."""
        registry = self.w.call(TA, "POST", f"/v1/tenants/{self.ids['tenant_a']}/registries", 201, json={
            "name": uniq("registry"), "host": self.allowlisted_host(), "username": "u", "password": "p"}).json()
        return f"/v1/tenants/{self.ids['tenant_a']}/registries/{registry['id']}"

    def member_id(self) -> str:
        return str(self.sql("SELECT id FROM app_instance_members WHERE instance_id = %s LIMIT 1",
                            (self.ids["instance_a1"],))["id"])


Request = tuple[str, str, dict[str, Any]]  # method, url, request kwargs


@dataclass
class Case:
    route: tuple[str, str]  # (method, path template) as registered in the app
    allowed: set[str]
    build: Callable[[Ctx, str], Request]
    scope: str  # what owns the target: platform (nothing), tenant (A), project (A1), or tenant A's private app
    note: str = ""  # tells apart two cases of one route


# Who cannot see a target owned at each scope (they are denied with 404, everyone else with 403). Tenant A's private
# app is unseen outside its tenant, the platform admin's view included (tenant data: break-glass).
BLIND = {"platform": set(), "tenant": {"other_tenant_admin"},
         "project": {"other_tenant_admin", "other_project_admin", "other_project_member", "other_service_account"}}
BLIND |= {"private_app": BLIND["tenant"] | {PA}, "private_app_in_project": BLIND["project"] | {PA}}


def private(method: str, path: str, allowed: set[str], build: Callable[[Ctx, str], Request],
            scope: str = "private_app") -> Case:
    """A case of a route on tenant A's private app (catalog/scope.py)."""
    return Case((method, path), allowed, build, scope, " (tenant A's private app)")
TENANT_ROUTES = ("/v1/tenants/{tenant_id}", "/v1/users/", "/v1/tokens/")
PROJECT_ROUTES = ("/v1/projects/", "/v1/instances/", "/v1/operations/", "/v1/allocations", "/v1/role-bindings",
                  "/v1/policy/", "/v1/audit")


def c(method: str, path: str, allowed: set[str], build: Callable[[Ctx, str], Request] | None = None) -> Case:
    """A case whose URL is the template with ids filled from the world, unless `build` says otherwise."""
    def default(ctx: Ctx, actor: str) -> Request:
        return method, path.format(**ctx.ids), {}
    scope = ("tenant" if path.startswith(TENANT_ROUTES) else "project" if path.startswith(PROJECT_ROUTES)
             else "platform")
    return Case((method, path), allowed, build or default, scope)


CASES: list[Case] = [
    c("GET", "/healthz", EVERYONE),
    c("GET", "/readyz", EVERYONE),
    # caller
    c("GET", "/v1/me", AUTHENTICATED),
    c("GET", "/v1/me/tokens", AUTHENTICATED),
    c("POST", "/v1/me/tokens", AUTHENTICATED, lambda x, a: ("POST", "/v1/me/tokens", {"json": {"name": "mine"}})),
    c("DELETE", "/v1/me/tokens/{token_id}", AUTHENTICATED, lambda x, a: (
        "DELETE", "/v1/me/tokens/" + (x.w.call(a, "POST", "/v1/me/tokens", 201, json={"name": "gone"}).json()["id"]
                                      if a != "anonymous" else str(uuid.uuid4())), {})),
    c("GET", "/v1/iam/roles", AUTHENTICATED),
    # tenants, projects, users
    c("POST", "/v1/tenants", {PA}, lambda x, a: ("POST", "/v1/tenants", {"json": {"name": uniq("t")}})),
    c("GET", "/v1/tenants", {PA}),
    c("GET", "/v1/tenants/{tenant_id}", {PA, TA}, lambda x, a: ("GET", f"/v1/tenants/{x.ids['tenant_a']}", {})),
    c("POST", "/v1/tenants/{tenant_id}/projects", {PA, TA}, lambda x, a: (
        "POST", f"/v1/tenants/{x.ids['tenant_a']}/projects", {"json": {"name": uniq("p")}})),
    c("GET", "/v1/tenants/{tenant_id}/projects", {PA, TA},
      lambda x, a: ("GET", f"/v1/tenants/{x.ids['tenant_a']}/projects", {})),
    c("GET", "/v1/projects/{project_id}", {PA} | PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/projects/{x.ids['project_a1']}", {})),
    c("POST", "/v1/tenants/{tenant_id}/users", {PA, TA}, lambda x, a: (
        "POST", f"/v1/tenants/{x.ids['tenant_a']}/users", {"json": {"email": f"{uniq('n')}@example.com"}})),
    c("GET", "/v1/tenants/{tenant_id}/users", {PA, TA},
      lambda x, a: ("GET", f"/v1/tenants/{x.ids['tenant_a']}/users", {})),
    c("GET", "/v1/users/{user_id}", {PA, TA, PM},
      lambda x, a: ("GET", f"/v1/users/{x.ids['user_project_member']}", {})),
    c("POST", "/v1/users/{user_id}/tokens", {PA, TA}, lambda x, a: (
        "POST", f"/v1/users/{x.ids['user_project_member']}/tokens", {"json": {"name": "issued"}})),
    c("DELETE", "/v1/tokens/{token_id}", {PA, TA},
      lambda x, a: ("DELETE", f"/v1/tokens/{x.fresh_user_token()}", {})),
    c("GET", "/v1/users/{user_id}/tokens", {PA, TA},
      lambda x, a: ("GET", f"/v1/users/{x.ids['user_project_member']}/tokens", {})),
    c("DELETE", "/v1/users/{user_id}/tokens", {PA, TA},
      lambda x, a: ("DELETE", f"/v1/users/{x.fresh_user()}/tokens", {})),
    # service accounts
    c("POST", "/v1/projects/{project_id}/service-accounts", {TA, PADM}, lambda x, a: (
        "POST", f"/v1/projects/{x.ids['project_a1']}/service-accounts",
        {"json": {"name": uniq("sa"), "roles": ["sa_viewer"]}})),
    c("GET", "/v1/projects/{project_id}/service-accounts", {TA, PADM},
      lambda x, a: ("GET", f"/v1/projects/{x.ids['project_a1']}/service-accounts", {})),
    c("GET", "/v1/projects/{project_id}/service-accounts/{sa_id}", {TA, PADM}, lambda x, a: (
        "GET", f"/v1/projects/{x.ids['project_a1']}/service-accounts/{x.ids['sa_service_account']}", {})),
    c("DELETE", "/v1/projects/{project_id}/service-accounts/{sa_id}", {TA, PADM}, lambda x, a: (
        "DELETE", f"/v1/projects/{x.ids['project_a1']}/service-accounts/{x.fresh_sa()}", {})),
    c("POST", "/v1/projects/{project_id}/service-accounts/{sa_id}/tokens", {TA, PADM}, lambda x, a: (
        "POST", f"/v1/projects/{x.ids['project_a1']}/service-accounts/{x.ids['sa_service_account']}/tokens",
        {"json": {"name": "more"}})),
    c("GET", "/v1/projects/{project_id}/service-accounts/{sa_id}/tokens", {TA, PADM}, lambda x, a: (
        "GET", f"/v1/projects/{x.ids['project_a1']}/service-accounts/{x.ids['sa_service_account']}/tokens", {})),
    # role bindings
    c("POST", "/v1/role-bindings", {PA, TA, PADM}, lambda x, a: ("POST", "/v1/role-bindings", {"json": {
        "principal_kind": "user", "principal_id": x.fresh_user(), "role": "project_member",
        "project_id": x.ids["project_a1"]}})),
    c("GET", "/v1/role-bindings", {PA, TA, PADM},
      lambda x, a: ("GET", "/v1/role-bindings", {"params": {"project_id": x.ids["project_a1"]}})),
    c("DELETE", "/v1/role-bindings/{binding_id}", {PA, TA, PADM},
      lambda x, a: ("DELETE", f"/v1/role-bindings/{x.fresh_binding()}", {})),
    # catalog
    c("POST", "/v1/catalog/apps", {PA}, lambda x, a: ("POST", "/v1/catalog/apps", {"json": {
        "slug": uniq("app"), "display_name": "App", "runtime_backend": "oci"}})),
    c("GET", "/v1/catalog/apps", AUTHENTICATED),
    c("GET", "/v1/catalog/apps/{slug}", AUTHENTICATED, lambda x, a: ("GET", "/v1/catalog/apps/slurm", {})),
    c("POST", "/v1/catalog/apps/{slug}/artifacts", {PA}, lambda x, a: (
        "POST", "/v1/catalog/apps/slurm/artifacts",
        {"json": {"kind": "oci", "reference": f"registry.example.com/x/{uniq('r')}@{DIGEST}"}})),
    c("GET", "/v1/catalog/apps/{slug}/artifacts", AUTHENTICATED,
      lambda x, a: ("GET", "/v1/catalog/apps/slurm/artifacts", {})),
    c("GET", "/v1/catalog/artifacts/{artifact_id}", AUTHENTICATED,
      lambda x, a: ("GET", f"/v1/catalog/artifacts/{x.active_artifact()}", {})),
    c("POST", "/v1/catalog/artifacts/{artifact_id}/transitions", {PA}, lambda x, a: (
        "POST", f"/v1/catalog/artifacts/{x.fresh_artifact()}/transitions", {"json": {"to": "staged", "reason": "ok"}})),
    c("POST", "/v1/catalog/artifacts/{artifact_id}/gates", {PA}, lambda x, a: (
        "POST", f"/v1/catalog/artifacts/{x.draft_collection()}/gates",
        {"json": {"kind": "staging", "reason": "release"}})),
    c("GET", "/v1/catalog/gates/{gate_id}", AUTHENTICATED,
      lambda x, a: ("GET", f"/v1/catalog/gates/{x.staging_gate()}", {})),
    c("GET", "/v1/catalog/apps/{slug}/gates", AUTHENTICATED,
      lambda x, a: ("GET", "/v1/catalog/apps/slurm/gates", {})),
    c("GET", "/v1/catalog/apps/{slug}/events", AUTHENTICATED,
      lambda x, a: ("GET", "/v1/catalog/apps/slurm/events", {})),
    c("POST", "/v1/catalog/apps/{slug}/versions", {PA}, lambda x, a: (
        "POST", "/v1/catalog/apps/slurm/versions", {"json": {
            "version": uniq("3.0"), "artifact_id": x.active_artifact(), "compatibility": SLURM_COMPAT,
            "adapter": SLURM_ADAPTER}})),
    c("GET", "/v1/catalog/apps/{slug}/versions", AUTHENTICATED,
      lambda x, a: ("GET", "/v1/catalog/apps/slurm/versions", {})),
    c("GET", "/v1/catalog/apps/{slug}/versions/{version}", AUTHENTICATED,
      lambda x, a: ("GET", "/v1/catalog/apps/slurm/versions/1.0.0", {})),
    c("POST", "/v1/catalog/apps/{slug}/versions/{version}/transitions", {PA}, lambda x, a: (
        "POST", f"/v1/catalog/apps/slurm/versions/{x.fresh_version()}/transitions",
        {"json": {"to": "active", "reason": "publish"}})),
    # tenant A's private catalog: its tenant admin publishes (a tenant publisher), everyone in the tenant reads
    Case(("POST", "/v1/catalog/apps"), {TA}, lambda x, a: ("POST", "/v1/catalog/apps", {"json": {
        "slug": uniq("tenant-a-app"), "display_name": "App", "runtime_backend": "oci",
        "tenant_id": x.ids["tenant_a"]}}), "tenant", " (tenant A's private app)"),
    private("GET", "/v1/catalog/apps/{slug}", AUTHENTICATED - {PA, "other_tenant_admin"},
            lambda x, a: ("GET", f"/v1/catalog/apps/{x.private_app()}", {})),
    private("GET", "/v1/catalog/apps/{slug}/artifacts", AUTHENTICATED - {PA, "other_tenant_admin"},
            lambda x, a: ("GET", f"/v1/catalog/apps/{x.private_app()}/artifacts", {})),
    private("GET", "/v1/catalog/artifacts/{artifact_id}", AUTHENTICATED - {PA, "other_tenant_admin"},
            lambda x, a: ("GET", f"/v1/catalog/artifacts/{x.private_artifact()}", {})),
    private("GET", "/v1/catalog/apps/{slug}/versions", AUTHENTICATED - {PA, "other_tenant_admin"},
            lambda x, a: ("GET", f"/v1/catalog/apps/{x.private_app()}/versions", {})),
    private("GET", "/v1/catalog/apps/{slug}/versions/{version}", AUTHENTICATED - {PA, "other_tenant_admin"},
            lambda x, a: ("GET", f"/v1/catalog/apps/{x.private_app()}/versions/1.0.0", {})),
    private("POST", "/v1/catalog/apps/{slug}/artifacts", {TA}, lambda x, a: (
        "POST", f"/v1/catalog/apps/{x.private_app()}/artifacts",
        {"json": {"kind": "oci", "reference": f"registry.example.com/a/{uniq('r')}@{DIGEST}"}})),
    private("POST", "/v1/catalog/artifacts/{artifact_id}/transitions", {TA}, lambda x, a: (
        "POST", f"/v1/catalog/artifacts/{x.fresh_private_artifact()}/transitions",
        {"json": {"to": "staged", "reason": "ok"}})),
    private("POST", "/v1/catalog/artifacts/{artifact_id}/gates", {TA}, lambda x, a: (
        "POST", f"/v1/catalog/artifacts/{x.draft_collection(TA, x.private_app())}/gates",
        {"json": {"kind": "staging", "reason": "release"}})),
    private("GET", "/v1/catalog/gates/{gate_id}", AUTHENTICATED - {PA, "other_tenant_admin"},
            lambda x, a: ("GET", f"/v1/catalog/gates/{x.staging_gate(private=True)}", {})),
    private("GET", "/v1/catalog/apps/{slug}/gates", AUTHENTICATED - {PA, "other_tenant_admin"},
            lambda x, a: ("GET", f"/v1/catalog/apps/{x.private_app()}/gates", {})),
    private("GET", "/v1/catalog/apps/{slug}/events", AUTHENTICATED - {PA, "other_tenant_admin"},
            lambda x, a: ("GET", f"/v1/catalog/apps/{x.private_app()}/events", {})),
    private("POST", "/v1/catalog/apps/{slug}/versions", {TA}, lambda x, a: (
        "POST", f"/v1/catalog/apps/{x.private_app()}/versions", {"json": {
            "version": uniq("3.0"), "artifact_id": x.private_artifact(), "compatibility": SLURM_COMPAT,
            "adapter": SLURM_ADAPTER}})),
    private("POST", "/v1/catalog/apps/{slug}/versions/{version}/transitions", {TA}, lambda x, a: (
        "POST", f"/v1/catalog/apps/{x.private_app()}/versions/{x.fresh_private_version()}/transitions",
        {"json": {"to": "active", "reason": "publish"}})),
    # a smoke run: a publisher of the app's catalog who also creates, deploys and decommissions instances in the
    # project (in the platform catalog nobody of this world is both: a platform publisher runs no tenant's instances)
    private("POST", "/v1/catalog/apps/{slug}/versions/{version}/gates", {TA}, lambda x, a: (
        "POST", f"/v1/catalog/apps/{x.private_app()}/versions/{x.fresh_private_version()}/gates",
        {"json": {"kind": "smoke", "project_id": x.ids["project_a1"], "allocation_ids": [x.ids[x.fresh_allocation()]],
                  "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
                  "reason": "smoke"}})),
    # which of tenant A's projects use its private apps: its tenant admin's call (platform apps: the platform admin's)
    private("POST", "/v1/projects/{project_id}/entitlements", {TA}, lambda x, a: (
        "POST", f"/v1/projects/{x.ids['project_a1']}/entitlements", {"json": {"app_slug": x.fresh_private_app()}}),
        "private_app_in_project"),
    private("DELETE", "/v1/projects/{project_id}/entitlements/{app_slug}", {TA}, lambda x, a: (
        "DELETE", "/v1/projects/{p}/entitlements/{s}".format(p=x.ids["project_a1"], s=x.sql(
            "INSERT INTO entitlements (tenant_id, project_id, app_slug) VALUES (%s, %s, %s) RETURNING app_slug",
            (x.ids["tenant_a"], x.ids["project_a1"], x.fresh_private_app()))["app_slug"]), {}),
        "private_app_in_project"),
    private("POST", "/v1/projects/{project_id}/instances", {TA, PADM, SA}, lambda x, a: (
        "POST", f"/v1/projects/{x.ids['project_a1']}/instances", {"json": {
            "name": uniq("i"), "app_slug": x.private_app(), "allocation_ids": [x.ids[x.fresh_allocation()]]}}),
        "project"),
    # entitlements and policy
    c("POST", "/v1/projects/{project_id}/entitlements", {PA}, lambda x, a: (
        "POST", f"/v1/projects/{x.ids['project_a1']}/entitlements", {"json": {"app_slug": x.fresh_app()}})),
    c("GET", "/v1/projects/{project_id}/entitlements", {PA} | PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/projects/{x.ids['project_a1']}/entitlements", {})),
    c("DELETE", "/v1/projects/{project_id}/entitlements/{app_slug}", {PA}, lambda x, a: (
        "DELETE", "/v1/projects/{p}/entitlements/{s}".format(p=x.ids["project_a1"], s=x.sql(
            "INSERT INTO entitlements (tenant_id, project_id, app_slug) VALUES (%s, %s, %s) RETURNING app_slug",
            (x.ids["tenant_a"], x.ids["project_a1"], x.fresh_app()))["app_slug"]), {})),
    c("POST", "/v1/policy/overlays", {PA, TA, PADM}, lambda x, a: (
        "POST", "/v1/policy/overlays", {"json": {"scope_kind": "project", "project_id": x.ids["project_a1"],
                                                 "dimension": x.clear_overlay("region"), "effect": "deny",
                                                 "values": ["us-east-9"]}})),
    c("GET", "/v1/policy/overlays", {PA} | PROJECT_READERS, lambda x, a: (
        "GET", "/v1/policy/overlays", {"params": {"scope_kind": "project", "project_id": x.ids["project_a1"]}})),
    c("DELETE", "/v1/policy/overlays/{overlay_id}", {PA, TA, PADM},
      lambda x, a: ("DELETE", f"/v1/policy/overlays/{x.fresh_overlay('sku')}", {})),
    c("GET", "/v1/projects/{project_id}/policy/effective", {PA} | PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/projects/{x.ids['project_a1']}/policy/effective", {})),
    # allocations
    c("POST", "/v1/allocations", {PA}, lambda x, a: ("POST", "/v1/allocations", {"json": {
        "project_id": x.ids["project_a1"], "name": uniq("al"), "capacity_shape": "gpu_slice", "gpu_count": 1,
        "region": "eu-west-1", "hosts": [{"name": "h0", "address": "10.77.1.1"}]}})),
    c("GET", "/v1/projects/{project_id}/allocations", {PA} | PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/projects/{x.ids['project_a1']}/allocations", {})),
    c("GET", "/v1/allocations/{allocation_id}", {PA} | PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/allocations/{x.ids['alloc_a1']}", {})),
    c("DELETE", "/v1/allocations/{allocation_id}", {PA}, lambda x, a: (
        "DELETE", "/v1/allocations/" + x.w.call(PA, "POST", "/v1/allocations", 201, json={
            "project_id": x.ids["project_a1"], "name": uniq("al"), "capacity_shape": "baremetal", "gpu_count": 8,
            "region": "eu-west-1", "hosts": [{"name": "h0", "address": "10.77.1.2"}]}).json()["id"], {})),
    # instances
    c("POST", "/v1/projects/{project_id}/instances", {TA, PADM, SA}, lambda x, a: (
        "POST", f"/v1/projects/{x.ids['project_a1']}/instances", {"json": {
            "name": uniq("i"), "app_slug": "slurm", "allocation_ids": [x.ids[x.fresh_allocation()]]}})),
    c("GET", "/v1/projects/{project_id}/instances", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/projects/{x.ids['project_a1']}/instances", {})),
    c("GET", "/v1/instances/{instance_id}", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.ids['instance_a1']}", {})),
    c("PATCH", "/v1/instances/{instance_id}", {TA, PADM, SA}, lambda x, a: (
        "PATCH", f"/v1/instances/{x.ids['instance_a1']}", {"json": {"labels": {"env": "test"}}})),
    c("DELETE", "/v1/instances/{instance_id}", {TA, PADM, SA},
      lambda x, a: ("DELETE", f"/v1/instances/{x.fresh_instance()}", {})),
    c("GET", "/v1/instances/{instance_id}/members", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.ids['instance_a1']}/members", {})),
    c("GET", "/v1/instances/{instance_id}/members/{member_id}", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.ids['instance_a1']}/members/{x.member_id()}", {})),
    c("GET", "/v1/instances/{instance_id}/events", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.ids['instance_a1']}/events", {})),
    # operations
    c("POST", "/v1/instances/{instance_id}/deploy", {TA, PADM, SA},
      lambda x, a: ("POST", f"/v1/instances/{x.fresh_instance()}/deploy", {})),
    c("POST", "/v1/instances/{instance_id}/reconfigure", {TA, PADM, SA}, lambda x, a: (
        "POST", f"/v1/instances/{x.running_instance()[0]}/reconfigure",
        {"json": {"parameters": {"slurm_controller_return_to_service": 1}}})),
    c("POST", "/v1/instances/{instance_id}/upgrade", {TA, PADM, SA}, lambda x, a: (
        "POST", f"/v1/instances/{x.running_instance()[0]}/upgrade",
        {"json": {"app_version_id": x.active_version_id()}})),
    c("POST", "/v1/instances/{instance_id}/rollback", {TA, PADM, SA},
      lambda x, a: ("POST", f"/v1/instances/{x.running_instance(previous=True)[0]}/rollback", {})),
    c("POST", "/v1/instances/{instance_id}/decommission", {TA, PADM, SA},
      lambda x, a: ("POST", f"/v1/instances/{x.running_instance()[0]}/decommission", {})),
    c("POST", "/v1/instances/{instance_id}/refresh", {TA, PADM, SA},
      lambda x, a: ("POST", f"/v1/instances/{x.running_instance()[0]}/refresh", {})),
    c("POST", "/v1/instances/{instance_id}/members", {TA, PADM, SA}, lambda x, a: (
        "POST", f"/v1/instances/{x.running_instance()[0]}/members",
        {"json": {"role": "worker", "allocation_id": x.ids[x.fresh_allocation()]}})),
    c("POST", "/v1/instances/{instance_id}/members/{member_id}/drain", {TA, PADM, SA},
      lambda x, a: ("POST", x.member_op("drain"), {})),
    c("POST", "/v1/instances/{instance_id}/members/{member_id}/resume", {TA, PADM, SA},
      lambda x, a: ("POST", x.member_op("resume", "drained"), {})),
    c("POST", "/v1/instances/{instance_id}/members/{member_id}/remove", {TA, PADM, SA},
      lambda x, a: ("POST", x.member_op("remove"), {})),
    c("POST", "/v1/instances/{instance_id}/members/{member_id}/replace", {TA, PADM, SA},
      lambda x, a: ("POST", x.member_op("replace"), {"json": {"allocation_id": x.ids[x.fresh_allocation()]}})),
    c("GET", "/v1/operations/{operation_id}", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/operations/{x.queued_operation()}", {})),
    c("POST", "/v1/operations/{operation_id}/cancel", {TA, PADM, SA},
      lambda x, a: ("POST", f"/v1/operations/{x.queued_operation()}/cancel", {})),
    c("POST", "/v1/instances/{instance_id}/credentials/{name}", {TA, PADM, SA}, lambda x, a: (
        "POST", f"/v1/instances/{x.credential_instance()}/credentials/{CREDENTIAL}", {})),
    # jobs and nodes (the toy scheduler answers), logins and SSH keys
    c("POST", "/v1/instances/{instance_id}/jobs", PROJECT_USERS, lambda x, a: (
        "POST", f"/v1/instances/{x.scheduler_instance()}/jobs", {"json": {"name": "j", "script": "#!/bin/sh\n"}})),
    c("GET", "/v1/instances/{instance_id}/jobs", PROJECT_USERS,
      lambda x, a: ("GET", f"/v1/instances/{x.scheduler_instance()}/jobs", {})),
    c("GET", "/v1/instances/{instance_id}/jobs/{job_id}", PROJECT_USERS, lambda x, a: ("GET", x.job_path(), {})),
    c("POST", "/v1/instances/{instance_id}/jobs/{job_id}/cancel", PROJECT_USERS,
      lambda x, a: ("POST", x.job_path("/cancel"), {})),
    c("GET", "/v1/instances/{instance_id}/nodes", PROJECT_USERS,
      lambda x, a: ("GET", f"/v1/instances/{x.scheduler_instance()}/nodes", {})),
    c("POST", "/v1/instances/{instance_id}/nodes/{name}/drain", {TA, PADM, SA}, lambda x, a: (
        "POST", f"/v1/instances/{x.scheduler_instance()}/nodes/n1/drain", {"json": {"reason": "matrix"}})),
    c("POST", "/v1/instances/{instance_id}/nodes/{name}/resume", {TA, PADM, SA},
      lambda x, a: ("POST", f"/v1/instances/{x.scheduler_instance()}/nodes/n1/resume", {})),
    c("POST", "/v1/instances/{instance_id}/nodes/{name}/features", {TA, PADM, SA}, lambda x, a: (
        "POST", f"/v1/instances/{x.scheduler_instance()}/nodes/n2/features", {"json": {"features": ["a100"]}})),
    c("GET", "/v1/instances/{instance_id}/access", {TA, PADM, PM},
      lambda x, a: ("GET", f"/v1/instances/{x.scheduler_instance()}/access", {})),
    c("GET", "/v1/instances/{instance_id}/access-map", {TA, PADM, SA},
      lambda x, a: ("GET", f"/v1/instances/{x.scheduler_instance()}/access-map", {})),
    c("POST", "/v1/instances/{instance_id}/access-sync", {TA, PADM, SA},
      lambda x, a: ("POST", f"/v1/instances/{x.running_instance()[0]}/access-sync", {})),
    c("GET", "/v1/instances/{instance_id}/access-drift", {TA, PADM, SA},
      lambda x, a: ("GET", f"/v1/instances/{x.scheduler_instance()}/access-drift", {})),
    # tenant-shared runtimes: changes are the tenant admin's, reads the runtime's own project's
    c("POST", "/v1/instances/{instance_id}/attachments", {TA}, lambda x, a: (
        "POST", f"/v1/instances/{x.shared_instance()}/attachments",
        {"json": {"project_id": x.attachable_project(), "reason": "matrix"}})),
    c("GET", "/v1/instances/{instance_id}/attachments", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.shared_instance()}/attachments", {})),
    c("GET", "/v1/instances/{instance_id}/attachments/{project_id}", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.shared_instance()}/attachments/{x.ids['project_a1']}", {})),
    c("POST", "/v1/instances/{instance_id}/attachments/{project_id}/detach", {TA}, lambda x, a: (
        "POST", f"/v1/instances/{x.shared_instance()}/attachments/{x.attached_project()}/detach",
        {"json": {"reason": "matrix"}})),
    c("GET", "/v1/instances/{instance_id}/billing", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.shared_instance()}/billing", {})),
    c("GET", "/v1/projects/{project_id}/attachments", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/projects/{x.ids['project_a1']}/attachments", {})),
    c("POST", "/v1/instances/{instance_id}/submit-grants", {TA}, lambda x, a: (
        "POST", f"/v1/instances/{x.shared_instance()}/submit-grants", {"json": x.submit_grant()})),
    c("GET", "/v1/instances/{instance_id}/submit-grants", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.shared_instance()}/submit-grants", {})),
    c("GET", "/v1/instances/{instance_id}/submit-grants/{grant_id}", PROJECT_READERS,
      lambda x, a: ("GET", x.live_grant(), {})),
    c("POST", "/v1/instances/{instance_id}/submit-grants/{grant_id}/revoke", {TA},
      lambda x, a: ("POST", x.live_grant() + "/revoke", {})),
    c("GET", "/v1/me/ssh-keys", PEOPLE),
    c("POST", "/v1/me/ssh-keys", PEOPLE,
      lambda x, a: ("POST", "/v1/me/ssh-keys", {"json": {"name": uniq("k"), "public_key": ssh_public_key()}})),
    c("DELETE", "/v1/me/ssh-keys/{key_id}", PEOPLE, lambda x, a: ("DELETE", f"/v1/me/ssh-keys/{x.own_ssh_key(a)}", {})),
    c("GET", "/v1/instances/{instance_id}/inventory", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.ids['instance_a1']}/inventory", {})),
    # the secrets and access map of the instance's runs, for AWX (docs/awx.md): apps.instance.run_secrets.read
    c("POST", "/v1/instances/{instance_id}/run-secrets", {TA, PADM, SA},
      lambda x, a: ("POST", f"/v1/instances/{x.ids['instance_a1']}/run-secrets", {})),
    c("GET", "/v1/instances/{instance_id}/operations", PROJECT_READERS,
      lambda x, a: ("GET", f"/v1/instances/{x.ids['instance_a1']}/operations", {})),
    c("GET", "/v1/operations/{operation_id}/artifacts", {TA, PADM, SA},
      lambda x, a: ("GET", f"/v1/operations/{x.queued_operation()}/artifacts", {})),
    c("GET", "/v1/instances/{instance_id}/events/stream", PROJECT_READERS, lambda x, a: (
        "GET", f"/v1/instances/{x.ids['instance_a1']}/events/stream", {"params": {"max_seconds": 1}})),
    # usage records (docs/metering.md): usage.read in the project, or on the tenant for its breakdown
    c("GET", "/v1/projects/{project_id}/usage", {TA, PADM, SA}, lambda x, a: (
        "GET", f"/v1/projects/{x.ids['project_a1']}/usage", {"params": USAGE_WINDOW})),
    c("GET", "/v1/tenants/{tenant_id}/usage", {TA}, lambda x, a: (
        "GET", f"/v1/tenants/{x.ids['tenant_a']}/usage", {"params": USAGE_WINDOW | {"format": "csv"}})),
    # audit
    c("GET", "/v1/audit", {PA, TA, PADM},
      lambda x, a: ("GET", "/v1/audit", {"params": {"project_id": x.ids["project_a1"]}})),
    # content store (addressed by digest alone): publishers, the platform's and every tenant's (their tenant admins)
    c("PUT", "/v1/content/{digest}", PUBLISHERS,
      lambda x, a: (lambda digest, data: ("PUT", f"/v1/content/{digest}", {"content": data}))(*x.fresh_content())),
    c("GET", "/v1/content/{digest}", PUBLISHERS, lambda x, a: ("GET", f"/v1/content/{x.stored_content()}", {})),
    c("HEAD", "/v1/content/{digest}", PUBLISHERS,
      lambda x, a: ("HEAD", f"/v1/content/{x.stored_content()}", {})),
    # registry token service (the token route itself takes pull credentials, not API tokens:
    # tests/api/test_registry_tokens.py)
    c("GET", "/v1/registry/certificate", {PA}, lambda x, a: ("GET", "/v1/registry/certificate", {})),
    # tenant-private registries: the platform admin's allowlist of hosts, each tenant's registries (its tenant admin)
    c("GET", "/v1/registries/allowlist", {PA}),
    c("POST", "/v1/registries/allowlist", {PA}, lambda x, a: (
        "POST", "/v1/registries/allowlist", {"json": {"host": f"{uniq('registry')}.example.com"}})),
    c("GET", "/v1/registries/allowlist/{host}", {PA},
      lambda x, a: ("GET", f"/v1/registries/allowlist/{x.allowlisted_host()}", {})),
    c("DELETE", "/v1/registries/allowlist/{host}", {PA},
      lambda x, a: ("DELETE", f"/v1/registries/allowlist/{x.allowlisted_host()}", {})),
    c("POST", "/v1/tenants/{tenant_id}/registries", {TA}, lambda x, a: (
        "POST", f"/v1/tenants/{x.ids['tenant_a']}/registries", {"json": {
            "name": uniq("registry"), "host": x.allowlisted_host(), "username": "u", "password": "p"}})),
    c("GET", "/v1/tenants/{tenant_id}/registries", {TA},
      lambda x, a: ("GET", f"/v1/tenants/{x.ids['tenant_a']}/registries", {})),
    c("GET", "/v1/tenants/{tenant_id}/registries/{registry_id}", {TA},
      lambda x, a: ("GET", x.tenant_registry(), {})),
    c("PUT", "/v1/tenants/{tenant_id}/registries/{registry_id}/credentials", {TA}, lambda x, a: (
        "PUT", f"{x.tenant_registry()}/credentials", {"json": {"username": "u2", "password": "p2"}})),
    c("DELETE", "/v1/tenants/{tenant_id}/registries/{registry_id}", {TA},
      lambda x, a: ("DELETE", x.tenant_registry(), {})),
    # break-glass
    c("GET", "/v1/admin/instances", {PA},
      lambda x, a: ("GET", "/v1/admin/instances", {"headers": {"X-Break-Glass-Reason": "incident 1234 triage"}})),
    c("GET", "/v1/admin/instances/{instance_id}", {PA}, lambda x, a: (
        "GET", f"/v1/admin/instances/{x.ids['instance_a1']}", {"headers": {"X-Break-Glass-Reason": "incident 1234"}})),
    c("POST", "/v1/admin/instances/{instance_id}/transitions", {PA}, lambda x, a: (
        "POST", f"/v1/admin/instances/{x.fresh_instance()}/transitions",
        {"json": {"to": "failed", "reason": "stuck"}, "headers": {"X-Break-Glass-Reason": "incident 1234"}})),
]


@pytest.fixture(scope="module")
def ctx(shared, tmp_path_factory):
    # Every probe that creates an instance or queues an operation does so in one project: lift the
    # project quotas here (their own test is tests/security/test_f7_fairness.py).
    # Versions move by hand without smoke runs or canary instances here (tests/api/test_smoke_gates.py tests those).
    shared.app.state.settings = replace(shared.app.state.settings, max_instances_per_project=0,
                                        promotion_canary_smoke=False, promotion_canary_instances=0)
    state = tmp_path_factory.mktemp("state")
    shared.app.state.operation_settings = OperationSettings(max_open_operations_per_project=0, state_dir=state)
    shared.app.state.content_store = embedded_store(state)  # the one runs install their collection from
    with pytest.MonkeyPatch.context() as patch:
        use_local_connection(patch)  # no SSH here: a credential's read reaches its test host locally
        ctx = Ctx(shared.world, shared.database, tmp_path_factory.mktemp("credentials"),
                  shared.app.state.operation_settings)
        yield ctx
        for toy in (ctx.toy, ctx.shared_toy):
            if toy is not None:
                toy.__exit__()


def test_every_route_has_a_case():
    app = create_app(dbmod.Database("dbname=unused"))
    registered = {(method.upper(), path) for path, ops in app.openapi()["paths"].items() for method in ops}
    covered = {case.route for case in CASES}
    assert registered - covered == set(), "routes without an authorization case"
    assert covered - registered == set(), "cases for routes that do not exist"


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.route[0]} {case.route[1]}{case.note}")
def test_authorization_matrix(ctx: Ctx, case: Case):
    wrong = []
    for actor in ACTORS:
        method, url, kwargs = case.build(ctx, actor)
        headers = ctx.w.headers(actor) | kwargs.pop("headers", {})
        response = ctx.w.client.request(method, url, headers=headers, **kwargs)
        status = response.status_code
        if actor in case.allowed:
            ok = 200 <= status < 300
        else:
            expected = 401 if actor == "anonymous" else 404 if actor in BLIND[case.scope] else 403
            ok = status == expected
            if ok and method != "HEAD":  # a HEAD answer has no body
                assert response.json()["error"]["code"] in ("unauthenticated", "forbidden", "not_found")
        if not ok:
            wrong.append((actor, "allow" if actor in case.allowed else "deny", status, response.text[:200]))
    assert not wrong, wrong

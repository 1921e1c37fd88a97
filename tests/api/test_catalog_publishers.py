"""Publishers and tenant-private apps (issue 29, item 1; docs/control-service.md "Publishers"): the
catalog_publisher role at platform or tenant scope, private apps seen and used only inside their tenant (another
tenant, and the platform admin, get the answers of an app that does not exist), and every publication audited
with the publisher and the digest. Real PostgreSQL, the real app, the world of tests/api/world.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time

import pytest
from gpuaas_api.content.store import ContentStore
from gpuaas_api.iam.service import check_tenant_name

from .world import SLURM_ADAPTER, SLURM_COMPAT, World, register_allocation

PRIVATE = "tenant-a-notebooks"  # tenant A's private app: its slug starts with the tenant's name


@pytest.fixture
def w(world: World, app, database, tmp_path) -> World:
    app.state.content_store = ContentStore(tmp_path / "content", database)
    # Its builds are stand-in bytes, and a tenant's private artifacts and versions are no platform admin's to move
    # past a gate: an operator who names no promotion gates (tests/api/test_promotion_gates.py and
    # test_smoke_gates.py run them).
    app.state.settings = dataclasses.replace(app.state.settings, promotion_staging_checks=(),
                                             promotion_canary_smoke=False, promotion_canary_instances=0)
    return world


def seat(w: World, granter: str, name: str, tenant: str, scope: dict) -> str:
    """A user of `tenant` with catalog_publisher at `scope` ({} platform, {"tenant_id": ...}), granted by
    `granter`; a token for it under w.tokens[name]. Returns the user's id."""
    user = w.call(granter, "POST", f"/v1/tenants/{w.ids[tenant]}/users", 201,
                  json={"email": f"{name.replace('_', '.')}@example.com"}).json()
    w.call(granter, "POST", "/v1/role-bindings", 201, json={
        "principal_kind": "user", "principal_id": user["id"], "role": "catalog_publisher"} | scope)
    w.tokens[name] = w.call(granter, "POST", f"/v1/users/{user['id']}/tokens", 201,
                            json={"name": "publish"}).json()["token"]
    w.ids[f"user_{name}"] = user["id"]
    return user["id"]


def publish(w: World, actor: str, slug: str, tenant_id: str | None) -> dict:
    """What `gpuaas apps publish` does, as `actor`: app, the build uploaded, its collection artifact promoted
    to active, an active version. Returns the digests and ids."""
    body = {"slug": slug, "display_name": f"Display of {slug}", "runtime_backend": "bare_metal"}
    app = w.call(actor, "POST", "/v1/catalog/apps", 201, json=body | ({"tenant_id": tenant_id} if tenant_id else {}))
    build = f"the collection build of {slug}".encode()
    digest = "sha256:" + hashlib.sha256(build).hexdigest()
    w.call(actor, "PUT", f"/v1/content/{digest}", 201, content=build)
    artifact = w.call(actor, "POST", f"/v1/catalog/apps/{slug}/artifacts", 201, json={
        "kind": "collection", "reference": f"collections/example.{slug.replace('-', '_')}:1.0.0@{digest}"}).json()
    for target in ("staged", "canary", "active"):
        w.call(actor, "POST", f"/v1/catalog/artifacts/{artifact['id']}/transitions", 200,
               json={"to": target, "reason": "publisher tests"})
    version = w.call(actor, "POST", f"/v1/catalog/apps/{slug}/versions", 201, json={
        "version": "1.0.0", "artifact_id": artifact["id"], "compatibility": SLURM_COMPAT,
        "adapter": SLURM_ADAPTER}).json()
    w.call(actor, "POST", f"/v1/catalog/apps/{slug}/versions/1.0.0/transitions", 200,
           json={"to": "active", "reason": "publisher tests"})
    return {"app": app.json(), "digest": digest, "artifact_id": artifact["id"], "version": version}


def instance_body(w: World, slug: str, allocation: str) -> dict:
    return {"name": f"uses-{slug}", "app_slug": slug, "allocation_ids": [w.ids[allocation]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]}


def test_a_private_app_is_seen_and_used_only_inside_its_tenant(w):
    seat(w, "tenant_admin", "publisher_a", "tenant_a", {"tenant_id": w.ids["tenant_a"]})
    published = publish(w, "publisher_a", PRIVATE, w.ids["tenant_a"])
    assert published["app"]["tenant_id"] == w.ids["tenant_a"]
    artifact, project_a1, project_b1 = published["artifact_id"], w.ids["project_a1"], w.ids["project_b1"]

    # Inside tenant A: listed and shown to its people and service accounts; usable once its admin entitles a project.
    for actor in ("tenant_admin", "project_admin", "project_member", "service_account", "other_project_member"):
        assert PRIVATE in [a["slug"] for a in w.call(actor, "GET", "/v1/catalog/apps", 200).json()["items"]]
        w.call(actor, "GET", f"/v1/catalog/apps/{PRIVATE}/versions/1.0.0", 200)
    w.ids["alloc_private"] = register_allocation(w, "project_a1", "alloc-private")["id"]
    refused = w.call("project_admin", "POST", f"/v1/projects/{project_a1}/instances", 403,
                     json=instance_body(w, PRIVATE, "alloc_private"))
    assert refused.json()["error"]["code"] == "not_entitled"
    w.call("project_admin", "POST", f"/v1/projects/{project_a1}/entitlements", 403, json={"app_slug": PRIVATE})
    w.call("tenant_admin", "POST", f"/v1/projects/{project_a1}/entitlements", 201, json={"app_slug": PRIVATE})
    instance = w.call("project_admin", "POST", f"/v1/projects/{project_a1}/instances", 201,
                      json=instance_body(w, PRIVATE, "alloc_private")).json()
    assert instance["app_slug"] == PRIVATE

    # Tenant B, and the platform admin (tenant data is reached only through break-glass): every route that names
    # the app answers as for an app that does not exist, and nothing lists it.
    missing = "tenant-a-never-published"
    for actor in ("other_tenant_admin", "platform_admin"):
        listed = w.call(actor, "GET", "/v1/catalog/apps", 200)
        assert PRIVATE not in listed.text and "Display of" not in listed.text
        for slug in (PRIVATE, missing):
            answers = [
                w.call(actor, "GET", f"/v1/catalog/apps/{slug}", 404),
                w.call(actor, "GET", f"/v1/catalog/apps/{slug}/artifacts", 404),
                w.call(actor, "GET", f"/v1/catalog/apps/{slug}/versions", 404),
                w.call(actor, "GET", f"/v1/catalog/apps/{slug}/versions/1.0.0", 404),
                w.call(actor, "POST", f"/v1/catalog/apps/{slug}/artifacts", 404,
                       json={"kind": "oci", "reference": f"registry.example.com/x/y@{published['digest']}"}),
                w.call(actor, "POST", f"/v1/catalog/apps/{slug}/versions/1.0.0/transitions", 404,
                       json={"to": "deprecated", "reason": "probe"}),
            ]
            for answer in answers:
                assert answer.json()["error"]["details"] == {"kind": "app", "id": slug}, answer.text
                assert "Display of" not in answer.text
        for method, url, body in (("GET", f"/v1/catalog/artifacts/{artifact}", None),
                                  ("POST", f"/v1/catalog/artifacts/{artifact}/transitions",
                                   {"to": "deprecated", "reason": "probe"})):
            answer = w.call(actor, method, url, 404, json=body)
            assert answer.json()["error"]["details"] == {"kind": "artifact", "id": artifact}
    # Entitling a project of tenant B, or of tenant A as the platform admin, and creating an instance in B.
    for actor, project in (("other_tenant_admin", project_b1), ("platform_admin", project_b1),
                           ("platform_admin", project_a1)):
        answer = w.call(actor, "POST", f"/v1/projects/{project}/entitlements", 404, json={"app_slug": PRIVATE})
        assert answer.json()["error"]["details"] == {"kind": "app", "id": PRIVATE}
    created = w.call("other_tenant_admin", "POST", f"/v1/projects/{project_b1}/instances", 404,
                     json=instance_body(w, PRIVATE, "alloc_b1"))
    assert created.json()["error"]["details"] == {"kind": "app", "id": PRIVATE}
    # A row written past the API (an entitlement of project B1) does not open it either.
    with w.client.app.state.db.transaction() as conn:
        conn.execute("INSERT INTO entitlements (tenant_id, project_id, app_slug) VALUES (%s, %s, %s)",
                     (w.ids["tenant_b"], project_b1, PRIVATE))
    w.call("other_tenant_admin", "POST", f"/v1/projects/{project_b1}/instances", 404,
           json=instance_body(w, PRIVATE, "alloc_b1"))
    w.call("other_tenant_admin", "DELETE", f"/v1/projects/{project_b1}/entitlements/{PRIVATE}", 404)


def test_a_tenant_publisher_publishes_neither_platform_wide_nor_into_another_tenant(w):
    seat(w, "tenant_admin", "publisher_a", "tenant_a", {"tenant_id": w.ids["tenant_a"]})
    seat(w, "other_tenant_admin", "publisher_b", "tenant_b", {"tenant_id": w.ids["tenant_b"]})
    theirs = publish(w, "publisher_b", "tenant-b-solver", w.ids["tenant_b"])
    app = {"display_name": "X", "runtime_backend": "bare_metal"}

    platform = w.call("publisher_a", "POST", "/v1/catalog/apps", 403, json=app | {"slug": "tenant-a-x"})
    assert platform.json()["error"]["details"] == {"permission": "apps.catalog.publish"}
    other = w.call("publisher_a", "POST", "/v1/catalog/apps", 404,
                   json=app | {"slug": "tenant-b-x", "tenant_id": w.ids["tenant_b"]})
    assert other.json()["error"]["details"] == {"kind": "tenant", "id": w.ids["tenant_b"]}
    # The platform's apps: seen, not published to.
    slurm_artifact = w.call("publisher_a", "GET", "/v1/catalog/apps/slurm/artifacts", 200).json()["items"][0]["id"]
    for method, url, body in (
            ("POST", "/v1/catalog/apps/slurm/artifacts",
             {"kind": "oci", "reference": f"registry.example.com/x/y@{theirs['digest']}"}),
            ("POST", "/v1/catalog/apps/slurm/versions", {"version": "9.9.9", "artifact_id": slurm_artifact,
                                                          "compatibility": SLURM_COMPAT, "adapter": SLURM_ADAPTER}),
            ("POST", f"/v1/catalog/artifacts/{slurm_artifact}/transitions", {"to": "deprecated", "reason": "no"}),
            ("POST", "/v1/catalog/apps/slurm/versions/1.0.0/transitions", {"to": "deprecated", "reason": "no"})):
        assert w.call("publisher_a", method, url, 403, json=body).json()["error"]["code"] == "forbidden"
    # Tenant B's private app does not exist for tenant A's publisher.
    w.call("publisher_a", "POST", "/v1/catalog/apps/tenant-b-solver/artifacts", 404,
           json={"kind": "oci", "reference": f"registry.example.com/x/y@{theirs['digest']}"})
    w.call("publisher_a", "POST", f"/v1/catalog/artifacts/{theirs['artifact_id']}/transitions", 404,
           json={"to": "deprecated", "reason": "probe"})
    # A private slug is in its tenant's namespace, so a refused name tells nothing of another tenant's apps.
    named = w.call("publisher_a", "POST", "/v1/catalog/apps", 422,
                   json=app | {"slug": "solver", "tenant_id": w.ids["tenant_a"]})
    assert named.json()["error"]["code"] == "app_slug_namespace"
    w.call("publisher_a", "POST", "/v1/catalog/apps", 422,
           json=app | {"slug": "tenant-b-solver", "tenant_id": w.ids["tenant_a"]})
    # The platform admin publishes platform apps; a tenant's private catalog is its own publishers'.
    refused = w.call("platform_admin", "POST", "/v1/catalog/apps", 403,
                     json=app | {"slug": "tenant-a-y", "tenant_id": w.ids["tenant_a"]})
    assert refused.json()["error"]["code"] == "forbidden"
    # People of the tenant without the role do not publish in it either.
    for actor in ("project_admin", "project_member", "service_account"):
        w.call(actor, "POST", "/v1/catalog/apps", 403,
               json=app | {"slug": "tenant-a-z", "tenant_id": w.ids["tenant_a"]})
        w.call(actor, "PUT", f"/v1/content/{theirs['digest']}", 403, content=b"x")


def test_a_tenant_admin_grants_the_role_only_within_its_tenant(w):
    tenant_a, tenant_b = w.ids["tenant_a"], w.ids["tenant_b"]
    seat(w, "tenant_admin", "publisher_a", "tenant_a", {"tenant_id": tenant_a})
    user_b = w.call("other_tenant_admin", "POST", f"/v1/tenants/{tenant_b}/users", 201,
                    json={"email": "dev@b.example.com"}).json()["id"]
    user_a = w.call("tenant_admin", "POST", f"/v1/tenants/{tenant_a}/users", 201,
                    json={"email": "dev@a.example.com"}).json()["id"]

    def grant(actor: str, principal_id: str, expect: int, kind: str = "user", **scope) -> dict:
        return w.call(actor, "POST", "/v1/role-bindings", expect, json={
            "principal_kind": kind, "principal_id": principal_id, "role": "catalog_publisher"} | scope).json()

    # Another tenant's scope, or its user: as if they did not exist. The platform scope: not the tenant admin's.
    assert grant("tenant_admin", user_b, 404, tenant_id=tenant_b)["error"]["details"]["kind"] == "tenant"
    assert grant("tenant_admin", user_b, 404, tenant_id=tenant_a)["error"]["details"]["kind"] == "user"
    assert grant("tenant_admin", user_a, 403)["error"]["code"] == "forbidden"
    assert grant("tenant_admin", user_a, 422, project_id=w.ids["project_a1"])["error"]["code"] == "invalid_scope"
    # Below the tenant admin, nobody grants it (no escalation), and a publisher does not pass it on.
    for actor in ("project_admin", "publisher_a"):
        grant(actor, user_a, 403, tenant_id=tenant_a)
    grant("tenant_admin", user_a, 201, tenant_id=tenant_a)

    # A project's service account, at its own tenant: CI publishing the tenant's apps, from its own project only.
    sa = w.ids["sa_service_account"]
    grant("tenant_admin", sa, 201, kind="service_account", tenant_id=tenant_a)
    grant("other_tenant_admin", sa, 404, kind="service_account", tenant_id=tenant_b)
    grant("platform_admin", sa, 422, kind="service_account", tenant_id=tenant_b)  # not its tenant
    published = publish(w, "service_account", "tenant-a-ci-app", tenant_a)
    assert published["app"]["tenant_id"] == tenant_a
    w.call("service_account", "POST", "/v1/catalog/apps", 403,
           json={"slug": "ci-platform-app", "display_name": "X", "runtime_backend": "bare_metal"})
    # Its binding is its tenant's: tenant B's admin cannot see it to remove it.
    bindings = w.call("tenant_admin", "GET", "/v1/role-bindings", 200, params={"tenant_id": tenant_a}).json()["items"]
    binding = next(b for b in bindings if b["principal_id"] == sa and b["role"] == "catalog_publisher")
    assert binding["scope_kind"] == "tenant" and binding["project_id"] is None
    w.call("other_tenant_admin", "DELETE", f"/v1/role-bindings/{binding['id']}", 404)
    w.call("tenant_admin", "DELETE", f"/v1/role-bindings/{binding['id']}", 204)
    w.call("service_account", "POST", "/v1/catalog/apps", 403, json={
        "slug": "tenant-a-late", "display_name": "X", "runtime_backend": "bare_metal", "tenant_id": tenant_a})


def test_every_publication_is_audited_with_the_publisher_and_the_digest(w):
    user = seat(w, "tenant_admin", "publisher_a", "tenant_a", {"tenant_id": w.ids["tenant_a"]})
    published = publish(w, "publisher_a", PRIVATE, w.ids["tenant_a"])
    rows = w.call("tenant_admin", "GET", "/v1/audit", 200,
                  params={"tenant_id": w.ids["tenant_a"], "actor_id": user, "limit": 100}).json()["items"]
    by_action = {r["action"]: r for r in rows if r["action"] != "apps.catalog.artifact.transition"}
    registered = {k: published["app"][k] for k in ("slug", "display_name", "description", "runtime_backend",
                                                    "operating_modes")}
    app_digest = "sha256:" + hashlib.sha256(json.dumps(registered, sort_keys=True,
                                                       separators=(",", ":")).encode()).hexdigest()
    adapter_digest = "sha256:" + hashlib.sha256(json.dumps(published["version"]["adapter"], sort_keys=True,
                                                           separators=(",", ":")).encode()).hexdigest()
    expected = {"apps.catalog.app.create": app_digest, "apps.catalog.content.upload": published["digest"],
                "apps.catalog.artifact.create": published["digest"],
                "apps.catalog.version.create": published["digest"]}
    publisher = {"kind": "user", "id": user, "name": "publisher.a@example.com"}
    assert expected.keys() <= by_action.keys(), sorted(by_action)
    for action, digest in expected.items():
        row = by_action[action]
        assert (row["actor_kind"], row["actor_id"], row["tenant_id"]) == ("user", user, w.ids["tenant_a"]), action
        assert row["after"]["publisher"] == publisher, action
        assert row["after"]["digest"] == digest and row["after"]["catalog"] == "tenant", action
    assert by_action["apps.catalog.version.create"]["after"]["adapter_digest"] == adapter_digest
    assert by_action["apps.catalog.app.create"]["app_slug"] == PRIVATE
    # A tenant's publications are its own rows: the platform admin reads them only with break-glass.
    platform = w.call("platform_admin", "GET", "/v1/audit", 200, params={"actor_id": user}).json()["items"]
    assert platform == []


def test_a_platform_publishers_app_is_seen_and_used_by_every_tenant(w):
    # An app developer of tenant A, trusted by the platform to publish platform apps.
    user = seat(w, "platform_admin", "platform_publisher", "tenant_a", {})
    published = publish(w, "platform_publisher", "shared-tool", None)
    assert published["app"]["tenant_id"] is None
    for actor in ("tenant_admin", "other_tenant_admin", "platform_admin", "other_project_member"):
        assert "shared-tool" in [a["slug"] for a in w.call(actor, "GET", "/v1/catalog/apps", 200).json()["items"]]
        w.call(actor, "GET", "/v1/catalog/apps/shared-tool/versions/1.0.0", 200)
    # Entitled by the platform admin, as every platform app; tenant admins cannot entitle it.
    w.call("other_tenant_admin", "POST", f"/v1/projects/{w.ids['project_b1']}/entitlements", 403,
           json={"app_slug": "shared-tool"})
    w.call("platform_admin", "POST", f"/v1/projects/{w.ids['project_b1']}/entitlements", 201,
           json={"app_slug": "shared-tool"})
    w.call("other_tenant_admin", "POST", f"/v1/projects/{w.ids['project_b1']}/instances", 201,
           json=instance_body(w, "shared-tool", "alloc_b1"))
    # Its own tenant's private catalog takes its tenant admin's grant, not the platform's.
    w.call("platform_publisher", "POST", "/v1/catalog/apps", 403, json={
        "slug": "tenant-a-own", "display_name": "X", "runtime_backend": "bare_metal", "tenant_id": w.ids["tenant_a"]})
    # Its platform binding reaches the catalog only: another tenant's things stay unseen (404, not 403), and its
    # catalog publications are platform rows; its uploads, and its tenant's other actions, its tenant's.
    w.call("platform_publisher", "GET", f"/v1/projects/{w.ids['project_b1']}", 404)
    w.call("platform_publisher", "GET", f"/v1/tenants/{w.ids['tenant_b']}/users", 404)
    rows = w.call("platform_admin", "GET", "/v1/audit", 200, params={"actor_id": user}).json()["items"]
    assert {r["action"] for r in rows} >= {"apps.catalog.app.create", "apps.catalog.version.create"}
    assert "apps.catalog.content.upload" not in {r["action"] for r in rows}
    assert all(r["tenant_id"] is None for r in rows)
    created = next(r for r in rows if r["action"] == "apps.catalog.app.create")
    assert created["after"]["catalog"] == "platform" and created["after"]["publisher"]["id"] == user


def refusal(response) -> dict:
    """An error answer without its correlation id: what tells one refusal from another."""
    error = dict(response.json()["error"])
    del error["correlation_id"]
    return error


def test_tenant_names_are_prefix_free_so_a_private_slug_has_one_owning_tenant(w, database):
    # A tenant named "tenant" would own tenant-a-solver too, and learn from a 409 that tenant A keeps it.
    for name, existing in (("tenant", "tenant-a"), ("tenant-a-x", "tenant-a"), ("tenant-b-lab-two", "tenant-b")):
        refused = w.call("platform_admin", "POST", "/v1/tenants", 409, json={"name": name}).json()["error"]
        assert refused["code"] == "tenant_name_namespace"
        assert refused["details"] == {"name": name, "conflicts_with": existing}
    assert w.call("platform_admin", "POST", "/v1/tenants", 409, json={"name": "tenant-a"}).json()["error"][
        "code"] == "already_exists"
    w.call("platform_admin", "POST", "/v1/tenants", 201, json={"name": "tenant-ab"})  # not a dash-prefix
    w.call("platform_admin", "POST", "/v1/tenants", 201, json={"name": "tenant-c"})
    with database.transaction() as conn:
        names = [r["name"] for r in conn.execute("SELECT name FROM tenants ORDER BY name")]
    assert names == ["tenant-a", "tenant-ab", "tenant-b", "tenant-c"]

    # Two creations at once check one after the other: while one transaction has checked "racer" and not yet
    # committed it, a creation of "racer-x" waits on the table lock, then sees "racer" and is refused.
    answers = []
    with database.transaction() as conn:
        check_tenant_name(conn, "racer")
        conn.execute("INSERT INTO tenants (name, display_name) VALUES ('racer', 'racer')")
        racer = threading.Thread(target=lambda: answers.append(
            w.call("platform_admin", "POST", "/v1/tenants", json={"name": "racer-x"})))
        racer.start()
        deadline = time.monotonic() + 30
        while not answers and time.monotonic() < deadline:
            with database.transaction() as probe:
                if probe.execute("SELECT 1 FROM pg_locks WHERE relation = 'tenants'::regclass AND NOT granted"
                                 ).fetchone():
                    break
            time.sleep(0.02)
        assert not answers, answers[0].text  # it waited for this transaction
    racer.join(30)
    assert answers[0].status_code == 409 and answers[0].json()["error"]["code"] == "tenant_name_namespace"


def test_a_platform_app_is_not_named_in_a_tenants_namespace(w):
    seat(w, "tenant_admin", "publisher_a", "tenant_a", {"tenant_id": w.ids["tenant_a"]})
    seat(w, "other_tenant_admin", "publisher_b", "tenant_b", {"tenant_id": w.ids["tenant_b"]})
    seat(w, "platform_admin", "platform_publisher", "tenant_a", {})  # tenant A's developer, trusted platform-wide
    # Both tenants publish their own private apps.
    assert publish(w, "publisher_b", "tenant-b-secret", w.ids["tenant_b"])["app"]["tenant_id"] == w.ids["tenant_b"]
    assert publish(w, "publisher_a", "tenant-a-solver", w.ids["tenant_a"])["app"]["tenant_id"] == w.ids["tenant_a"]

    # A platform publisher probing tenant B's namespace: the same refusal whether B keeps the app or not, naming no
    # tenant, and nothing is created there (no land grab). Its own tenant's namespace is no platform app's either.
    app = {"display_name": "X", "runtime_backend": "bare_metal"}
    answers = {(actor, slug): w.call(actor, "POST", "/v1/catalog/apps", 422, json=app | {"slug": slug})
               for actor in ("platform_publisher", "platform_admin")
               for slug in ("tenant-b-secret", "tenant-b-nothing", "tenant-a-solver", "tenant-a-tool")}
    for (_, slug), answer in answers.items():
        error = refusal(answer)
        assert error["code"] == "app_slug_namespace" and error["details"] == {"slug": slug}
        assert "tenant-b" not in error["message"] and "tenant-a" not in error["message"]
    assert len({refusal(answer)["message"] for answer in answers.values()}) == 1
    w.call("other_tenant_admin", "GET", "/v1/catalog/apps/tenant-b-nothing", 404)
    w.call("publisher_b", "POST", "/v1/catalog/apps", 201,
           json=app | {"slug": "tenant-b-nothing", "tenant_id": w.ids["tenant_b"]})
    # Outside every tenant's namespace, platform apps are published as before (a name merely starting like one).
    publish(w, "platform_publisher", "tenant-shared-tool", None)


def test_a_private_build_is_its_uploaders_tenants_even_through_a_platform_binding(w):
    # Tenant A's developer publishing platform apps (a platform binding) and its tenant's (its tenant admin's grant).
    user = seat(w, "platform_admin", "dual", "tenant_a", {})
    w.call("tenant_admin", "POST", "/v1/role-bindings", 201, json={
        "principal_kind": "user", "principal_id": user, "role": "catalog_publisher", "tenant_id": w.ids["tenant_a"]})
    published = publish(w, "dual", "tenant-a-dual", w.ids["tenant_a"])
    digest = published["digest"]

    rows = w.call("tenant_admin", "GET", "/v1/audit", 200, params={
        "tenant_id": w.ids["tenant_a"], "actor_id": user, "action": "apps.catalog.content.upload"}).json()["items"]
    assert [(r["tenant_id"], r["after"]["catalog"], r["after"]["tenant_id"], r["after"]["digest"]) for r in rows] == [
        (w.ids["tenant_a"], "tenant", w.ids["tenant_a"], digest)]
    platform = w.call("platform_admin", "GET", "/v1/audit", 200, params={
        "actor_id": user, "action": "apps.catalog.content.upload"}).json()["items"]
    assert platform == []  # a tenant's row: the platform reads it only with break-glass
    # The build is tenant A's: its admin reads it, tenant B's admin gets the answer of content never stored.
    w.call("tenant_admin", "GET", f"/v1/content/{digest}", 200)
    never = "sha256:" + hashlib.sha256(b"never uploaded").hexdigest()
    for method in ("GET", "HEAD"):
        w.call("other_tenant_admin", method, f"/v1/content/{digest}", 404)
    assert (refusal(w.call("other_tenant_admin", "GET", f"/v1/content/{digest}", 404))["details"]
            == {"kind": "content", "id": digest})
    w.call("other_tenant_admin", "GET", f"/v1/content/{never}", 404)

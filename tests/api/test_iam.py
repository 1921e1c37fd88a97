from __future__ import annotations

import hashlib
import uuid

import pytest
from gpuaas_api.errors import ApiError
from gpuaas_api.iam.service import bootstrap_platform_admin


def test_token_is_shown_once_and_stored_hashed(world, database):
    issued = world.call("tenant_admin", "POST", "/v1/me/tokens", 201, json={"name": "ci"}).json()
    token = issued["token"]
    assert token.startswith("gpa_") and len(token) > 40
    with database.transaction() as conn:
        row = conn.execute("SELECT * FROM api_tokens WHERE id = %s", (issued["id"],)).fetchone()
    assert row["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in str(row)
    listed = world.call("tenant_admin", "GET", "/v1/me/tokens", 200).json()["items"]
    assert issued["id"] in [t["id"] for t in listed]
    assert all("token" not in t for t in listed)
    assert world.client.get("/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_revoked_and_expired_tokens_are_refused(world, database):
    issued = world.call("project_admin", "POST", "/v1/me/tokens", 201, json={"name": "short"}).json()
    auth = {"Authorization": f"Bearer {issued['token']}"}
    world.call("project_admin", "DELETE", f"/v1/me/tokens/{issued['id']}", 200)
    r = world.client.get("/v1/me", headers=auth)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    assert r.headers["www-authenticate"] == "Bearer"

    other = world.call("project_admin", "POST", "/v1/me/tokens", 201, json={"name": "old"}).json()
    with database.transaction() as conn:
        conn.execute("UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = %s", (other["id"],))
    assert world.client.get("/v1/me", headers={"Authorization": f"Bearer {other['token']}"}).status_code == 401
    assert world.client.get("/v1/me", headers={"Authorization": "Bearer gpa_not-a-token"}).status_code == 401
    assert world.client.get("/v1/me", headers={"Authorization": "Basic dXNlcjpwdw=="}).status_code == 401


def test_cannot_revoke_someone_elses_token_through_me(world):
    theirs = world.call("tenant_admin", "POST", "/v1/me/tokens", 201, json={"name": "x"}).json()
    world.call("project_admin", "DELETE", f"/v1/me/tokens/{theirs['id']}", 404)


def test_me_lists_grants_as_permission_keys(world):
    me = world.call("service_account", "GET", "/v1/me", 200).json()
    assert me["kind"] == "service_account" and me["project_id"] == world.ids["project_a1"]
    (grant,) = me["grants"]
    assert grant["role"] == "sa_operator" and "apps.instance.create" in grant["permissions"]
    assert "iam.role_binding.create" not in grant["permissions"]


def test_service_account_is_confined_to_its_project(world):
    # Even a tenant-scoped binding cannot be given to a service account, nor a binding in another project.
    sa = world.ids["sa_service_account"]
    r = world.call("tenant_admin", "POST", "/v1/role-bindings", 422, json={
        "principal_kind": "service_account", "principal_id": sa, "role": "sa_viewer",
        "project_id": world.ids["project_a2"]})
    assert r.json()["error"]["code"] == "invalid_principal"
    r = world.call("tenant_admin", "POST", "/v1/role-bindings", 422, json={
        "principal_kind": "service_account", "principal_id": sa, "role": "tenant_admin",
        "tenant_id": world.ids["tenant_a"]})
    assert r.json()["error"]["code"] == "invalid_principal"
    # Outside its project it is told what a caller with no access is told: not found.
    world.call("service_account", "GET", f"/v1/projects/{world.ids['project_a2']}/instances", 404)


def test_no_privilege_escalation_through_role_bindings(world):
    user = world.call("tenant_admin", "POST", f"/v1/tenants/{world.ids['tenant_a']}/users", 201,
                      json={"email": "new@example.com"}).json()
    # A project admin cannot hand out a tenant-wide role ...
    world.call("project_admin", "POST", "/v1/role-bindings", 403, json={
        "principal_kind": "user", "principal_id": user["id"], "role": "tenant_admin",
        "tenant_id": world.ids["tenant_a"]})
    # ... nor any role in a project it does not administer (it cannot even see that project: 404) ...
    world.call("project_admin", "POST", "/v1/role-bindings", 404, json={
        "principal_kind": "user", "principal_id": user["id"], "role": "project_member",
        "project_id": world.ids["project_a2"]})
    # ... and a user of tenant A cannot be bound in tenant B.
    r = world.call("platform_admin", "POST", "/v1/role-bindings", 422, json={
        "principal_kind": "user", "principal_id": user["id"], "role": "project_admin",
        "project_id": world.ids["project_b1"]})
    assert r.json()["error"]["code"] == "invalid_principal"
    created = world.call("project_admin", "POST", "/v1/role-bindings", 201, json={
        "principal_kind": "user", "principal_id": user["id"], "role": "project_member",
        "project_id": world.ids["project_a1"]}).json()
    world.call("project_admin", "POST", "/v1/role-bindings", 409, json={
        "principal_kind": "user", "principal_id": user["id"], "role": "project_member",
        "project_id": world.ids["project_a1"]})
    world.call("project_admin", "DELETE", f"/v1/role-bindings/{created['id']}", 204)


def test_the_last_platform_admin_binding_cannot_be_removed(world):
    bindings = world.call("platform_admin", "GET", "/v1/role-bindings", 200).json()["items"]
    (pa,) = [b for b in bindings if b["role"] == "platform_admin"]
    r = world.call("platform_admin", "DELETE", f"/v1/role-bindings/{pa['id']}", 409)
    assert r.json()["error"]["code"] == "last_platform_admin"


def test_disabling_a_service_account_revokes_its_access(world):
    pid, sa = world.ids["project_a1"], world.ids["sa_service_account"]
    world.call("service_account", "GET", f"/v1/projects/{pid}/instances", 200)
    world.call("project_admin", "DELETE", f"/v1/projects/{pid}/service-accounts/{sa}", 200)
    world.call("service_account", "GET", f"/v1/projects/{pid}/instances", 401)
    world.call("project_admin", "POST", f"/v1/projects/{pid}/service-accounts/{sa}/tokens", 404, json={"name": "x"})


def test_bootstrap_happens_once(database, world):
    with pytest.raises(ApiError) as exc, database.transaction() as conn:
        bootstrap_platform_admin(conn, "second@platform.example", 1)
    assert exc.value.code == "already_bootstrapped"


def test_iam_mutations_are_audited_with_correlation_id(world):
    cid = f"test-{uuid.uuid4()}"
    r = world.call("tenant_admin", "POST", f"/v1/tenants/{world.ids['tenant_a']}/projects", 201,
                   json={"name": "audited"}, headers={"X-Correlation-ID": cid})
    assert r.headers["x-correlation-id"] == cid
    entries = world.call("tenant_admin", "GET", "/v1/audit", 200,
                         params={"tenant_id": world.ids["tenant_a"], "correlation_id": cid}).json()["items"]
    assert [e["action"] for e in entries] == ["iam.project.create"]
    assert entries[0]["actor_id"] == world.ids["user_tenant_admin"]
    assert entries[0]["project_id"] == r.json()["id"]


def test_list_endpoints_paginate_with_keyset_cursors(world):
    tid = world.ids["tenant_a"]
    for i in range(5):
        world.call("tenant_admin", "POST", f"/v1/tenants/{tid}/projects", 201, json={"name": f"page-{i}"})
    seen, cursor = [], None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = world.call("tenant_admin", "GET", f"/v1/tenants/{tid}/projects", 200, params=params).json()
        seen += [p["name"] for p in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["project-a1", "project-a2"] + [f"page-{i}" for i in range(5)]
    r = world.call("tenant_admin", "GET", f"/v1/tenants/{tid}/projects", 400, params={"cursor": "bm9wZQ"})
    assert r.json()["error"]["code"] == "invalid_cursor"

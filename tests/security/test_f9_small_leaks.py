"""Issue 7, finding 9: the smaller leaks. One test per leak (the token ones are in test_f8_*)."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import pytest
import uvicorn
from api.world import World, build_world
from gpuaas_api.config import Settings


@pytest.fixture
def world(client, database) -> World:
    return build_world(client, database)


def _error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    err = response.json()["error"]
    assert err["code"] == code and err["correlation_id"] == response.headers["x-correlation-id"]
    return err


def _without(err: dict, ident: str) -> str:
    """The error with the id it names and its correlation id blanked: what must match between a foreign id
    and a missing one."""
    return json.dumps({**err, "correlation_id": ""}).replace(ident, "<id>")


def test_foreign_callers_get_the_same_404_as_for_a_missing_id(world):
    ids, missing = world.ids, str(uuid.uuid4())
    owners = [ids["tenant_a"], ids["project_a1"]]
    probes = [  # (method, url template, json body template or None, the A1 or tenant A resource it names)
        ("GET", "/v1/instances/{}", None, ids["instance_a1"]),
        ("GET", "/v1/instances/{}/members", None, ids["instance_a1"]),
        ("GET", "/v1/projects/{}", None, ids["project_a1"]),
        ("GET", "/v1/projects/{}/instances", None, ids["project_a1"]),
        ("GET", "/v1/allocations/{}", None, ids["alloc_a1"]),
        ("GET", "/v1/users/{}", None, ids["user_project_member"]),
        ("GET", "/v1/tenants/{}/users", None, ids["tenant_a"]),
        ("GET", "/v1/role-bindings?project_id={}", None, ids["project_a1"]),
        ("POST", "/v1/role-bindings", {"principal_kind": "user", "principal_id": ids["user_project_member"],
                                       "role": "project_member", "project_id": "{}"}, ids["project_a1"]),
    ]
    for actor in ("other_tenant_admin", "other_project_member", "other_service_account"):
        for method, url, body, real in probes:
            if actor != "other_tenant_admin" and real in (ids["tenant_a"], ids["user_project_member"]):
                continue  # tenant A's own members may know what tenant A holds at tenant level
            answers = []
            for ident in (real, missing):
                kwargs = {"json": json.loads(json.dumps(body).replace("{}", ident))} if body else {}
                response = world.call(actor, method, url.format(ident), **kwargs)
                err = _error(response, 404, "not_found")
                answers.append(_without(err, ident))
                assert not any(owner in response.text for owner in owners if owner != ident), response.text
            assert answers[0] == answers[1], (actor, url, answers)
    # A caller inside the project who lacks the permission is told so: it can see the instance anyway.
    _error(world.call("project_member", "DELETE", f"/v1/instances/{ids['instance_a1']}"), 403, "forbidden")


def test_creating_a_user_does_not_reveal_emails_of_other_tenants(world):
    taken = "project.admin@example.com"  # a tenant A user
    world.call("other_tenant_admin", "POST", f"/v1/tenants/{world.ids['tenant_b']}/users", 201,
               json={"email": taken})
    # Within one tenant an email is still unique, whatever its case.
    _error(world.call("tenant_admin", "POST", f"/v1/tenants/{world.ids['tenant_a']}/users",
                      json={"email": taken.upper()}), 409, "already_exists")


def test_request_bodies_have_a_size_limit(world):
    limit = Settings().max_body_bytes
    assert limit == 1024 * 1024
    big = json.dumps({"name": "big", "display_name": "x" * limit}).encode()
    url = "/v1/tenants"
    headers = world.headers("platform_admin") | {"content-type": "application/json"}
    _error(world.client.post(url, content=big, headers=headers), 413, "payload_too_large")

    def chunks():  # no Content-Length: the limit must hold for chunked bodies too
        for i in range(0, len(big), 65536):
            yield big[i:i + 65536]
    _error(world.client.post(url, content=chunks(), headers=headers), 413, "payload_too_large")
    # Just under the limit is an ordinary request (here refused by validation, not by size).
    small = json.dumps({"name": "small", "display_name": "x" * (limit - 100)}).encode()
    _error(world.client.post(url, content=small, headers=headers), 422, "validation_error")


@pytest.mark.parametrize("bad", ["..", "../../etc/passwd", "a..b", "x/y", "a:b", "." * 10, "a" * 200])
def test_correlation_id_is_a_safe_path_component(world, bad):
    r = world.client.get("/healthz", headers={"X-Correlation-ID": bad})
    assert r.headers["x-correlation-id"] != bad and "." not in r.headers["x-correlation-id"]
    assert world.client.get("/healthz", headers={"X-Correlation-ID": "req-42_A"}).headers[
        "x-correlation-id"] == "req-42_A"


def test_platform_admin_reads_tenant_audit_only_through_break_glass(world):
    marker = "tenant-private-label-7731"
    world.call("service_account", "PATCH", f"/v1/instances/{world.ids['instance_a1']}", 200,
               json={"labels": {"note": marker}})
    tenant = {"tenant_id": world.ids["tenant_a"]}
    assert marker in world.call("tenant_admin", "GET", "/v1/audit", 200, params=tenant).text
    for params in ({}, tenant, {"project_id": world.ids["project_a1"]}):
        body = world.call("platform_admin", "GET", "/v1/audit", 200, params=params | {"limit": 500}).text
        assert marker not in body, params
    reason = {"X-Break-Glass-Reason": "incident 77 investigation"}
    assert marker in world.call("platform_admin", "GET", "/v1/audit", 200, params=tenant | {"limit": 500},
                                headers=reason).text
    entries = world.call("platform_admin", "GET", "/v1/audit", 200, params={"action": "audit.read"}).json()["items"]
    assert entries and entries[0]["break_glass"] and entries[0]["reason"] == reason["X-Break-Glass-Reason"]
    # The tenant sees that its audit log was read.
    assert "audit.read" in world.call("tenant_admin", "GET", "/v1/audit", 200, params=tenant).text


def _raw_request(port: int, target: bytes) -> tuple[int, dict, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body


def test_a_raw_invalid_byte_in_the_query_gets_the_envelope(app):
    from gpuaas_api.app import SERVER_OPTIONS  # what `gpuaas serve` runs uvicorn with

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off", **SERVER_OPTIONS))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        for target in (b"/v1/me?limit=\xff", b"/healthz?x=\x01"):
            status, headers, body = _raw_request(port, target)
            assert status == 400 and headers["content-type"] == "application/json", (target, body)
            err = json.loads(body)["error"]
            assert err["code"] == "bad_request" and err["correlation_id"] == headers["x-correlation-id"]
        assert _raw_request(port, b"/healthz")[0] == 200
    finally:
        server.should_exit = True
        thread.join(10)


def test_no_role_binding_for_a_deleted_service_account(world):
    pid = world.ids["project_a1"]
    sa = world.call("project_admin", "POST", f"/v1/projects/{pid}/service-accounts", 201,
                    json={"name": "short-lived", "roles": ["sa_viewer"]}).json()
    world.call("project_admin", "DELETE", f"/v1/projects/{pid}/service-accounts/{sa['id']}", 200)
    r = world.call("project_admin", "POST", "/v1/role-bindings", json={
        "principal_kind": "service_account", "principal_id": sa["id"], "role": "sa_operator", "project_id": pid})
    _error(r, 404, "not_found")
    bindings = world.call("project_admin", "GET", "/v1/role-bindings", 200, params={"project_id": pid}).json()
    assert sa["id"] not in json.dumps(bindings)

"""One envelope for every error, and a correlation id on every response."""

from __future__ import annotations

import re


def _envelope(r, status, code):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"code", "message", "details", "correlation_id"}
    assert err["code"] == code
    assert err["correlation_id"] == r.headers["x-correlation-id"]
    return err


def test_unknown_route_wrong_method_and_validation_share_the_envelope(world):
    _envelope(world.client.get("/nope"), 404, "not_found")
    _envelope(world.client.put("/healthz"), 405, "method_not_allowed")
    err = _envelope(world.call("platform_admin", "POST", "/v1/tenants", json={"name": "Bad Name!"}), 422,
                    "validation_error")
    assert err["details"]["errors"][0]["loc"] == ["body", "name"]
    _envelope(world.call("platform_admin", "GET", "/v1/tenants/not-a-uuid"), 422, "validation_error")
    _envelope(world.call("platform_admin", "POST", "/v1/tenants", content=b"{", headers={
        "content-type": "application/json"}), 422, "validation_error")
    _envelope(world.call("platform_admin", "GET", "/v1/tenants/00000000-0000-0000-0000-000000000000"), 404,
              "not_found")
    _envelope(world.client.get("/v1/me"), 401, "unauthenticated")


def test_validation_errors_do_not_echo_input(world):
    secret = "s3cr3t-value-that-must-not-echo"
    r = world.call("platform_admin", "POST", "/v1/tenants", json={"name": secret.upper()})
    assert r.status_code == 422 and secret.upper() not in r.text


def test_text_postgres_cannot_store_is_a_422_not_a_500(world):
    r = world.call("platform_admin", "POST", "/v1/tenants", json={"name": "ok-name", "display_name": "a\u0000b"})
    _envelope(r, 422, "validation_error")
    r = world.call("platform_admin", "POST", "/v1/tenants", content='{"name": "ok-name", "display_name": "\\ud800"}',
                   headers={"content-type": "application/json"})
    _envelope(r, 422, "validation_error")


def test_correlation_id_is_echoed_or_generated(world):
    r = world.client.get("/healthz", headers={"X-Correlation-ID": "abc-123"})
    assert r.headers["x-correlation-id"] == "abc-123"
    r = world.client.get("/healthz", headers={"X-Correlation-ID": "bad value with spaces"})
    assert re.fullmatch(r"[0-9a-f-]{36}", r.headers["x-correlation-id"])
    assert world.client.get("/healthz").headers["x-correlation-id"]


def test_health_and_readiness(world):
    assert world.client.get("/healthz").json() == {"status": "ok"}
    assert world.client.get("/readyz").json() == {"status": "ready"}


def test_duplicate_is_a_conflict(world):
    _envelope(world.call("platform_admin", "POST", "/v1/tenants", json={"name": "tenant-a"}), 409, "already_exists")

"""Issue 22, finding 5: a principal minted API tokens without limit (a read-only service account
minted 120 in a row). A principal now holds at most `token_max_live_per_principal` live tokens (not
revoked, not expired), whoever mints them: the next mint is a 429 `quota_exceeded` envelope that
names the cap and says to revoke a token; revoking one, or one expiring, frees a slot; two mints
racing for the last slot cannot both win."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from api.world import World, build_world
from gpuaas_api.config import Settings
from gpuaas_api.errors import ApiError
from gpuaas_api.iam import service

CAP = 5  # production default: 50


@pytest.fixture
def world(app, client, database) -> World:
    app.state.settings = dataclasses.replace(Settings(), token_max_live_per_principal=CAP)
    return build_world(client, database)


def _live(database, kind: str, principal_id: str) -> int:
    with database.transaction() as conn:
        return conn.execute("""SELECT count(*) AS n FROM api_tokens WHERE principal_kind = %s AND principal_id = %s
                                 AND revoked_at IS NULL AND expires_at > now()""",
                            (kind, principal_id)).fetchone()["n"]


def _refused_at_cap(response) -> None:
    error = response.json().get("error")  # a 201's body holds a secret: never in the test's output
    assert response.status_code == 429 and error, response.status_code
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {"quota": "live_tokens", "limit": CAP, "current": CAP}
    assert f"at most {CAP} live tokens" in error["message"] and "revoke" in error["message"], error["message"]
    assert error["correlation_id"] == response.headers["x-correlation-id"]


def test_a_read_only_service_account_mints_up_to_the_cap_and_revoking_frees_a_slot(world, database):
    pid = world.ids["project_a1"]
    sa = world.call("project_admin", "POST", f"/v1/projects/{pid}/service-accounts", 201,
                    json={"name": "reader", "roles": ["sa_viewer"]}).json()["id"]
    sa_tokens = f"/v1/projects/{pid}/service-accounts/{sa}/tokens"
    mine = {"Authorization": "Bearer " + world.call("project_admin", "POST", sa_tokens, 201,
                                                    json={"name": "first"}).json()["token"]}

    minted = [world.client.post("/v1/me/tokens", headers=mine, json={"name": f"self-{i}"}) for i in range(CAP - 1)]
    assert [r.status_code for r in minted] == [201] * (CAP - 1)
    _refused_at_cap(world.client.post("/v1/me/tokens", headers=mine, json={"name": "one-too-many"}))
    # The cap is the principal's, whoever mints: its project admin is refused too.
    _refused_at_cap(world.call("project_admin", "POST", sa_tokens, json={"name": "admin-mint"}))
    assert _live(database, "service_account", sa) == CAP

    # Revoking one of its tokens frees a slot, for one more token only.
    world.client.delete(f"/v1/me/tokens/{minted[0].json()['id']}", headers=mine).raise_for_status()
    assert world.client.post("/v1/me/tokens", headers=mine, json={"name": "again"}).status_code == 201
    _refused_at_cap(world.client.post("/v1/me/tokens", headers=mine, json={"name": "again-too-many"}))
    # So does a token that has expired.
    with database.transaction() as conn:
        conn.execute("UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = %s",
                     (minted[1].json()["id"],))
    assert world.client.post("/v1/me/tokens", headers=mine, json={"name": "after-expiry"}).status_code == 201


def test_an_admin_minting_for_a_user_is_capped_too(world):
    user = world.ids["user_project_member"]  # holds the world's one token
    for i in range(CAP - 1):
        world.call("platform_admin", "POST", f"/v1/users/{user}/tokens", 201, json={"name": f"admin-{i}"})
    _refused_at_cap(world.call("platform_admin", "POST", f"/v1/users/{user}/tokens", json={"name": "one-too-many"}))


def test_two_mints_racing_for_the_last_slot_cannot_both_win(world, database, app):
    settings, sa = app.state.settings, world.ids["sa_service_account"]  # holds the world's one token
    with database.transaction() as conn:
        for i in range(CAP - 2):
            service.issue_token(conn, settings, "service_account", sa, f"fill-{i}", None)
    outcome = []

    def second_mint():
        try:
            with database.transaction() as conn:
                service.issue_token(conn, settings, "service_account", sa, "second", None)
            outcome.append("minted")
        except ApiError as exc:
            outcome.append(exc.code)

    with database.transaction() as conn:
        service.issue_token(conn, settings, "service_account", sa, "first", None)  # the last slot, uncommitted
        racer = threading.Thread(target=second_mint)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive(), f"the second mint did not wait for the first one's transaction: {outcome}"
    racer.join(10)
    assert outcome == ["quota_exceeded"]
    assert _live(database, "service_account", sa) == CAP

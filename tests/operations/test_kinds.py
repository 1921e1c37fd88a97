"""The operation kinds table (operations/kinds.py) and its readers: the table is complete and
consistent; the status truth it drives moves real database rows as documented for every kind; and a
kind the app version's adapter cannot do is refused when it is requested.

The runs here are played by hand (claim, status moves, finish, as a worker does) without a playbook:
what is under test is what the table says happens around a run, not the run."""

from __future__ import annotations

import typing

import pytest
from gpuaas_api.config import DEFAULT_OPERATION_TIMEOUTS
from gpuaas_api.errors import ApiError
from gpuaas_api.iam.permissions import ROLES
from gpuaas_api.instances import rules as irules
from gpuaas_api.operations import rules, service, truth
from gpuaas_api.operations.kinds import ACTION_KINDS, INSTANCE, KIND_NAMES, KINDS, Effect, Members
from gpuaas_api.operations.schemas import OperationKind

from .helpers import TEST_APP, events, make_instance, members, publish_test_app

SA = "service_account"
WORKER = "kinds-test-worker"


# The table ---------------------------------------------------------------------------------------

def _steps(kind):
    return kind.on_start + kind.on_success + kind.on_failure + kind.on_cancel_queued


@pytest.mark.parametrize("name", KIND_NAMES)
def test_every_kind_row_is_complete_and_consistent(name):
    kind = KINDS[name]
    granted = set().union(*(r.permissions for r in ROLES.values()))
    assert kind.permissions and set(kind.permissions) <= granted
    assert DEFAULT_OPERATION_TIMEOUTS[name] == kind.timeout_s > 0
    # a playbook for it in the adapter, or a status read-back
    assert kind.needs in ("action", "status")
    assert (name in ACTION_KINDS) == (kind.needs == "action")
    statuses = set(irules.INSTANCE_TRANSITIONS)
    assert kind.accept_states <= statuses and kind.run_states <= statuses
    assert kind.run_states - kind.accept_states <= {"created", "starting", "stopping"}
    assert set(kind.queued_as) | set(kind.queued_as.values()) <= statuses
    assert {kind.route_target, kind.creates} - {None} <= set(kind.targets)
    assert (kind.member_states is not None) <= (kind.route_target is not None)
    assert kind.member_states is None or kind.member_states <= set(irules.MEMBER_TRANSITIONS)
    assert kind.request_check is None or kind.request_check in service.REQUEST_CHECKS
    for step in _steps(kind):
        if isinstance(step, Effect):
            assert step.name in truth.EFFECTS
        elif step.who == INSTANCE:
            assert step.to in statuses
        else:
            assert isinstance(step.who, Members) or step.who in kind.targets
            assert step.to in irules.MEMBER_TRANSITIONS


def test_the_api_literal_and_the_timeouts_name_exactly_the_table():
    assert typing.get_args(OperationKind) == KIND_NAMES
    assert tuple(DEFAULT_OPERATION_TIMEOUTS) == KIND_NAMES
    assert set(ACTION_KINDS) == set(KIND_NAMES) - {"refresh"}


def test_a_refused_instance_status_names_the_kind_and_its_code():
    with pytest.raises(ApiError) as refused:
        rules.check_instance("deploy", {"status": "running"}, accepting=True)
    assert refused.value.code == "instance_already_deployed"
    with pytest.raises(ApiError) as refused:
        rules.check_instance("member_drain", {"status": "created"}, accepting=True)
    assert refused.value.code == "instance_not_operable" and refused.value.details["kind"] == "member_drain"


# The status truth, on real rows -----------------------------------------------------------------

def post(ops, path: str, expect: int = 202, **kw) -> dict:
    return ops.w.call(SA, "POST", path, expect, **kw).json()


def play(ops, op: dict, *, fail: str | None = None, outcome: dict | None = None) -> dict:
    """One run of `op` as a worker records it: claimed, checked, started, finished."""
    with ops.database.transaction() as conn:
        claimed = service.claim(conn, WORKER, 30, "test-machine")
        assert claimed is not None and str(claimed["id"]) == op["id"], "the operation heads its queue"
        instance = conn.execute("SELECT * FROM app_instances WHERE id = %s", (claimed["instance_id"],)).fetchone()
        rules.check_instance(claimed["kind"], instance, accepting=False)
        truth.on_start(conn, claimed)
    with ops.database.transaction() as conn:
        if fail:
            final = service.finish(conn, claimed["id"], WORKER, "failed",
                                   error={"code": "run_failed", "message": fail})
            truth.on_failure(conn, final, fail)
        else:
            final = service.finish(conn, claimed["id"], WORKER, "succeeded", result=outcome or {})
            truth.on_success(conn, final, outcome or {})
    return final


def statuses(ops, iid: str) -> dict[str, str]:
    return {m["id"]: m["status"] for m in members(ops, iid)}


def instance(ops, iid: str) -> dict:
    return ops.w.call(SA, "GET", f"/v1/instances/{iid}", 200).json()


def desired(ops, iid: str, role: str) -> int:
    return next(r["desired_count"] for r in instance(ops, iid)["topology"]["roles"] if r["name"] == role)


def test_every_kind_moves_the_statuses_its_row_says(ops):
    created, _ = make_instance(ops, "walk")
    iid = created["id"]
    controller, w1, w2 = sorted(members(ops, iid), key=lambda m: (m["role"], m["node_name"]))
    assert controller["role"] == "controller" and w1["role"] == w2["role"] == "worker"

    # deploy fails: every member and the instance failed; a retry brings them up. Healthy is not
    # claimed: only the health check says it (its first check is due at once)
    play(ops, post(ops, f"/v1/instances/{iid}/deploy"), fail="planned")
    assert instance(ops, iid)["status"] == "failed" and set(statuses(ops, iid).values()) == {"failed"}
    play(ops, post(ops, f"/v1/instances/{iid}/deploy"))
    assert instance(ops, iid)["status"] == "running" and set(statuses(ops, iid).values()) == {"active"}
    timeline = events(ops, iid)
    types = [e["type"] for e in timeline]
    assert types.index("start_completed") < types.index("apps.instance.running") and "healthy" not in types
    assert next(e for e in timeline if e["type"] == "start_completed")["payload"]["members"] == 3

    # member_add targets the member it creates: joining in its run, failed when the run fails
    add = post(ops, f"/v1/instances/{iid}/members", json={"role": "worker", "allocation_id": ops.ids["alloc_ops"]})
    (new,) = add["member_ids"]
    assert add["params"]["targets"] == {"members": [new]} and statuses(ops, iid)[new] == "pending"
    play(ops, add, fail="planned")
    assert statuses(ops, iid)[new] == "failed"
    remove = post(ops, f"/v1/instances/{iid}/members/{new}/remove")
    assert remove["params"]["targets"] == {"members": [new]} and remove["member_ids"] == [new]
    play(ops, remove)
    assert statuses(ops, iid)[new] == "removed"

    # drain, then resume
    play(ops, post(ops, f"/v1/instances/{iid}/members/{w1['id']}/drain"))
    assert statuses(ops, iid)[w1["id"]] == "drained"
    play(ops, post(ops, f"/v1/instances/{iid}/members/{w1['id']}/resume"))
    assert statuses(ops, iid)[w1["id"]] == "active"

    # replace names old and new; canceled before its run, the new member is gone and uncounted
    body, workers = {"allocation_id": ops.ids["alloc_ops2"]}, desired(ops, iid, "worker")
    replace = post(ops, f"/v1/instances/{iid}/members/{w1['id']}/replace", json=body)
    old, new = replace["member_ids"]
    assert old == w1["id"] and replace["params"]["targets"] == {"old": [old], "new": [new]}
    assert desired(ops, iid, "worker") == workers + 1
    ops.w.call(SA, "POST", f"/v1/operations/{replace['id']}/cancel", 202)
    assert statuses(ops, iid)[new] == "removed" and statuses(ops, iid)[old] == "active"
    assert desired(ops, iid, "worker") == workers
    replace = post(ops, f"/v1/instances/{iid}/members/{w1['id']}/replace", json=body)
    _, new = replace["member_ids"]
    play(ops, replace)
    assert statuses(ops, iid)[new] == "active" and statuses(ops, iid)[old] == "removed"
    old_types = [e["type"] for e in events(ops, iid, member_id=old)]
    assert old_types[-4:] == ["member_draining", "member_drained", "member_removing", "member_removed"]

    # reconfigure keeps the parameters; upgrade and rollback switch the version
    play(ops, post(ops, f"/v1/instances/{iid}/reconfigure", json={"parameters": {"round": 7}}))
    assert instance(ops, iid)["parameters"]["round"] == 7
    newer = publish_test_app(ops.w, "1.1.0")
    play(ops, post(ops, f"/v1/instances/{iid}/upgrade", json={"app_version_id": newer["id"]}))
    assert instance(ops, iid)["app_version"] == "1.1.0"
    play(ops, post(ops, f"/v1/instances/{iid}/rollback"))
    assert instance(ops, iid)["app_version"] == "1.0.0"
    moved = [e["payload"] for e in events(ops, iid) if e["type"] in ("apps.instance.upgraded",
                                                                     "apps.instance.rolled_back")]
    assert moved == [{"from": "1.0.0", "to": "1.1.0"}, {"from": "1.1.0", "to": "1.0.0"}]

    # refresh applies what the status read-back observed (None: unknown, left alone)
    play(ops, post(ops, f"/v1/instances/{iid}/refresh"), outcome={"observed": {w2["id"]: "drained", new: None}})
    assert statuses(ops, iid)[w2["id"]] == "drained" and statuses(ops, iid)[new] == "active"
    assert next(e for e in events(ops, iid) if e["type"] == "refresh_completed")["payload"] == {
        "observed": 2, "changed": 1}

    # decommission: a failed run fails the instance, a retry stops it with every member removed
    play(ops, post(ops, f"/v1/instances/{iid}/decommission"), fail="planned")
    assert instance(ops, iid)["status"] == "failed"
    play(ops, post(ops, f"/v1/instances/{iid}/decommission"))
    assert instance(ops, iid)["status"] == "stopped" and set(statuses(ops, iid).values()) == {"removed"}
    types = [e["type"] for e in events(ops, iid)]
    assert types.count("apps.instance.deleting") == 2 and types[-1] == "apps.instance.deleted"


# Refused when requested: what the version's adapter cannot do -----------------------------------------

def publish_variant(ops, version: str, drop_actions=(), **adapter) -> dict:
    """A version of the test app on the same artifact whose adapter lacks some actions, or differs."""
    base = ops.w.call("platform_admin", "GET", f"/v1/catalog/apps/{TEST_APP}/versions/1.0.0", 200).json()
    spec = base["adapter"] | adapter
    spec["actions"] = {k: v for k, v in spec["actions"].items() if k not in drop_actions}
    ops.w.call("platform_admin", "POST", f"/v1/catalog/apps/{TEST_APP}/versions", 201, json={
        "version": version, "artifact_id": base["artifact_id"], "compatibility": base["compatibility"],
        "runtime_profile": base["runtime_profile"], "adapter": spec})
    return ops.w.call("platform_admin", "POST", f"/v1/catalog/apps/{TEST_APP}/versions/{version}/transitions", 200,
                      json={"to": "active", "reason": "tests", "skip_gates": True}).json()


def refused(ops, path: str, kind: str, version: str, **kw) -> None:
    err = ops.w.call(SA, "POST", path, 409, **kw).json()["error"]
    assert err["code"] == "action_not_supported", err
    assert kind in err["message"] and version in err["message"]
    assert err["details"]["kind"] == kind and err["details"]["version"] == version


def test_a_kind_the_versions_adapter_cannot_do_is_refused_when_requested(ops):
    partial = publish_variant(ops, "1.0.0-partial", drop_actions=("member_add", "member_drain"),
                              status=None, health=None)
    publish_variant(ops, "1.0.0-noupgrade", drop_actions=("upgrade",))
    body = {"name": "partial", "app_slug": TEST_APP, "version": partial["version"],
            "allocation_ids": [ops.ids["alloc_ops"]], "parameters": {"marker_dir": str(ops.marker_root)},
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]}
    iid = ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 201, json=body).json()["id"]
    play(ops, post(ops, f"/v1/instances/{iid}/deploy"))
    assert instance(ops, iid)["status"] == "running"
    # no health declared: the deploy claims none
    types = [e["type"] for e in events(ops, iid)]
    assert "start_completed" in types and "healthy" not in types

    before = statuses(ops, iid)
    worker = next(m for m in members(ops, iid) if m["role"] == "worker")
    refused(ops, f"/v1/instances/{iid}/members", "member_add", "1.0.0-partial",
            json={"role": "worker", "allocation_id": ops.ids["alloc_ops"]})
    refused(ops, f"/v1/instances/{iid}/members/{worker['id']}/drain", "member_drain", "1.0.0-partial")
    refused(ops, f"/v1/instances/{iid}/refresh", "refresh", "1.0.0-partial")
    noupgrade = ops.w.call("platform_admin", "GET", f"/v1/catalog/apps/{TEST_APP}/versions/1.0.0-noupgrade",
                           200).json()
    refused(ops, f"/v1/instances/{iid}/upgrade", "upgrade", "1.0.0-noupgrade",
            json={"app_version_id": noupgrade["id"]})
    # nothing of the refused requests is left: no pending member, no operation
    assert statuses(ops, iid) == before
    assert [o["kind"] for o in ops.w.call(SA, "GET", f"/v1/instances/{iid}/operations", 200).json()["items"]] == [
        "deploy"]
    # the target version's adapter decides for an upgrade: onto one that has the action, accepted
    base = ops.w.call("platform_admin", "GET", f"/v1/catalog/apps/{TEST_APP}/versions/1.0.0", 200).json()
    post(ops, f"/v1/instances/{iid}/upgrade", json={"app_version_id": base["id"]})


def test_removals_queued_together_never_take_a_role_below_its_minimum(ops):
    created, _ = make_instance(ops, "minimum")
    iid = created["id"]
    play(ops, post(ops, f"/v1/instances/{iid}/deploy"))
    ctl = next(m for m in members(ops, iid) if m["role"] == "controller")
    w1, w2 = sorted((m for m in members(ops, iid) if m["role"] == "worker"), key=lambda m: m["node_name"])
    post(ops, f"/v1/instances/{iid}/members/{w1['id']}/remove")  # queued: no worker runs it here
    error = ops.w.call(SA, "POST", f"/v1/instances/{iid}/members/{w2['id']}/remove", 409).json()["error"]
    assert error["code"] == "role_minimum" and error["details"] == {"role": "worker", "minimum": 1, "staying": 0}
    assert "replace it instead" in error["message"]
    error = ops.w.call(SA, "POST", f"/v1/instances/{iid}/members/{ctl['id']}/remove", 409).json()["error"]
    assert error["code"] == "role_minimum"
    # a replacement keeps the count: the way to swap the last member of a role
    post(ops, f"/v1/instances/{iid}/members/{w2['id']}/replace", json={"allocation_id": ops.ids["alloc_ops2"]})

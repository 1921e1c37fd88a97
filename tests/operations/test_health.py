"""The scheduled health check (health/): a real ad-hoc ansible-runner run of the test app's status
module, a test double of a scheduler's read-back (tests/apps/opsapp fake_nodes: there is no scheduler
here; real Slurm and OCI hosts are in tests/e2e), on localhost; the verdict recorded in the real
PostgreSQL. What a check changes: member and instance statuses (with their reasons), the conditions,
the runtime detail, and events only when the health changes."""

from __future__ import annotations

import json
import threading

from gpuaas_api.health import service as health
from gpuaas_api.health.checker import HealthChecker
from prometheus_client import REGISTRY

from .helpers import events, make_instance, members, wait_op

SA = "service_account"


def deployed(ops, name: str) -> tuple[str, dict, object]:
    instance, marker = make_instance(ops, name)
    iid = instance["id"]
    worker = ops.start_worker()
    op = wait_op(ops, ops.w.call(SA, "POST", f"/v1/instances/{iid}/deploy", 202).json()["id"])
    assert op["status"] == "succeeded", op
    worker.stop.set()
    ops.sql("""UPDATE app_versions SET adapter = jsonb_set(adapter, '{status,options}',
                                                         jsonb_build_object('path', %s::text))
                WHERE id = %s RETURNING id""", (str(marker / "nodes.json"), instance["app_version_id"]))
    by_name = {m["node_name"]: m for m in members(ops, iid)}
    return iid, by_name, marker


def check(ops, iid: str) -> None:
    """Make the instance due and run one check, as a worker's health thread does."""
    ops.sql("UPDATE app_instances SET health_due_at = now() WHERE id = %s RETURNING id", (iid,))
    assert HealthChecker(ops.database, ops.settings, "test", threading.Event()).check_one("test/health-0")


def instance(ops, iid: str) -> dict:
    return ops.w.call(SA, "GET", f"/v1/instances/{iid}", 200).json()


def member(ops, iid: str, node: str) -> dict:
    return next(m for m in members(ops, iid) if m["node_name"] == node)


def checks_counted(result: str) -> float:
    return REGISTRY.get_sample_value("gpuaas_health_check_duration_seconds_count", {"result": result}) or 0.0


def test_a_failed_member_degrades_the_instance_then_recovers_with_events(ops, local_hosts):
    iid, nodes, marker = deployed(ops, "health")
    degraded_checks = checks_counted("degraded")
    ctl = next(n for n, m in nodes.items() if m["role"] == "controller")
    w1, w2 = sorted(n for n, m in nodes.items() if m["role"] == "worker")
    (marker / "nodes.json").write_text(json.dumps({w1: "active", w2: {"state": "failed", "details": {
        "reason": f"slurmd is not running on {w2}", "node_state": "IDLE*"}}}))
    check(ops, iid)  # one read is a blip, not yet a failure: nothing moves, no event
    assert instance(ops, iid)["status"] == "running" and member(ops, iid, w2)["status"] == "active"
    assert member(ops, iid, w2)["runtime"]["observed"] == "failed"
    assert "unhealthy" not in [e["type"] for e in events(ops, iid)]
    check(ops, iid)  # the second read confirms it
    assert checks_counted("degraded") == degraded_checks + 2
    got = instance(ops, iid)
    assert got["status"] == "degraded" and got["status_reason"].startswith("health check: 1 member(s) failed")
    conditions = {c["type"]: c for c in got["health"]["conditions"]}
    assert conditions["ControlPlaneAvailable"]["status"] == "True"
    assert conditions["MembersHealthy"]["status"] == "False" and w2 in conditions["MembersHealthy"]["message"]
    assert got["health"]["check"]["module"] == "gpuaas_tests.opsapp.fake_nodes"
    worker_role = next(r for r in got["topology"]["roles"] if r["name"] == "worker")
    assert worker_role["members_by_status"] == {"active": 1, "failed": 1}
    failed = member(ops, iid, w2)
    assert failed["status"] == "failed" and failed["status_reason"] == f"health check: slurmd is not running on {w2}"
    assert failed["runtime"]["details"] == {"reason": f"slurmd is not running on {w2}", "node_state": "IDLE*"}
    assert failed["runtime"]["reachable"] is True and failed["last_operation"]["kind"] == "deploy"
    unhealthy = [e for e in events(ops, iid) if e["type"] == "unhealthy"]
    assert len(unhealthy) == 1 and unhealthy[0]["payload"]["module"] == "gpuaas_tests.opsapp.fake_nodes"
    assert unhealthy[0]["payload"]["failed_members"] == [f"{w2}: slurmd is not running on {w2}"]

    # the same reading again: nothing moves, no event; the condition keeps its transition time
    check(ops, iid)
    assert [e["type"] for e in events(ops, iid)].count("unhealthy") == 1
    again = {c["type"]: c for c in instance(ops, iid)["health"]["conditions"]}
    assert again["MembersHealthy"]["last_transition_at"] == conditions["MembersHealthy"]["last_transition_at"]

    # recovery: the member and the instance come back, each with its event, and one healthy event
    (marker / "nodes.json").write_text(json.dumps({w1: "active", w2: "active"}))
    check(ops, iid)
    assert instance(ops, iid)["status"] == "running" and member(ops, iid, w2)["status"] == "active"
    types = [e["type"] for e in events(ops, iid)]
    assert types.count("member_recovered") == 1 and types[-1] == "healthy" and "apps.instance.running" in types
    assert member(ops, iid, ctl)["status"] == "active"


def test_a_check_never_moves_what_an_operation_is_about_to_move(ops, local_hosts):
    iid, nodes, marker = deployed(ops, "busy")
    w1, w2 = sorted(n for n, m in nodes.items() if m["role"] == "worker")
    # a drain of w1 is queued (no worker runs it): the check reads w1 failed but leaves it to the drain
    ops.w.call(SA, "POST", f"/v1/instances/{iid}/members/{nodes[w1]['id']}/drain", 202)
    (marker / "nodes.json").write_text(json.dumps({w1: "failed", w2: "active"}))
    check(ops, iid)
    check(ops, iid)
    w1_now = member(ops, iid, w1)
    assert w1_now["status"] == "active" and w1_now["runtime"]["observed"] == "failed"
    assert instance(ops, iid)["status"] == "running"


def test_a_dead_control_plane_fails_the_instance_and_a_live_one_brings_it_back(ops, local_hosts):
    iid, nodes, marker = deployed(ops, "ctl")
    w1, w2 = sorted(n for n, m in nodes.items() if m["role"] == "worker")
    # no nodes.json: the status module fails on the controller's host (read twice: confirmed)
    check(ops, iid)
    assert instance(ops, iid)["status"] == "running"
    check(ops, iid)
    got = instance(ops, iid)
    assert got["status"] == "failed"
    assert got["status_reason"].startswith("health check: the control plane did not answer: ")
    ctl = next(m for m in members(ops, iid) if m["role"] == "controller")
    assert ctl["status"] == "failed" and "the check failed on" in ctl["status_reason"]
    assert {member(ops, iid, w)["status"] for w in (w1, w2)} == {"active"}  # nobody read them: left alone
    (marker / "nodes.json").write_text(json.dumps({w1: "active", w2: "active"}))
    check(ops, iid)  # a failed instance is still checked while the check is what failed it
    assert instance(ops, iid)["status"] == "running"
    assert next(m for m in members(ops, iid) if m["role"] == "controller")["status"] == "active"


def test_checks_are_claimed_one_per_tenant_per_round_and_one_in_flight_per_instance(ops):
    ids = [make_instance(ops, f"fair{i}", workers=1, allocation=("alloc_ops", "alloc_ops", "alloc_ops2")[i])[0]["id"]
           for i in range(3)]
    tenant_b, project_b = ops.ids["tenant_b"], ops.ids["project_b1"]
    ops.sql("UPDATE app_instances SET status = 'running', health_due_at = now() - interval '1 minute' "
            "WHERE id = ANY(%s::uuid[]) RETURNING id", (ids,))
    ops.sql("UPDATE app_instances SET tenant_id = %s, project_id = %s, health_due_at = now() WHERE id = %s "
            "RETURNING id", (tenant_b, project_b, ids[2]))
    # tenant a has a check in flight: its more overdue instance yields to tenant b's
    with ops.database.transaction() as conn:
        (leased,) = health.claim(conn, "x", 1, 60)
    assert str(leased["tenant_id"]) == ops.ids["tenant_a"]
    with ops.database.transaction() as conn:
        (fair,) = health.claim(conn, "y", 1, 60)
    assert str(fair["id"]) == ids[2]
    ops.sql("UPDATE app_instances SET health_lease_until = NULL, health_due_at = now() - interval '1 minute' "
            "WHERE id = ANY(%s::uuid[]) RETURNING id", (ids[:2],))
    ops.sql("UPDATE app_instances SET health_lease_until = NULL, health_due_at = now() WHERE id = %s RETURNING id",
            (ids[2],))
    with ops.database.transaction() as conn:
        assert health.any_due(conn)
        first = health.claim(conn, "a", 2, 60)
    # tenant a has two due instances, tenant b one: a round takes one of each, however many a has
    assert sorted(str(r["tenant_id"]) for r in first) == sorted([ops.ids["tenant_a"], tenant_b])
    with ops.database.transaction() as conn:
        second = health.claim(conn, "b", 10, 60)
    assert [str(r["id"]) for r in second] == [i for i in ids if i not in {str(r["id"]) for r in first}]
    with ops.database.transaction() as conn:
        assert health.claim(conn, "c", 10, 60) == []  # every one leased: one check in flight each
        assert not health.any_due(conn)


def test_a_run_that_fails_on_one_host_fails_that_member_alone(ops):
    iid, nodes, _ = deployed(ops, "onehost")
    w1, w2 = sorted(n for n, m in nodes.items() if m["role"] == "worker")
    ops.start_worker()
    op = wait_op(ops, ops.w.call(SA, "POST", f"/v1/instances/{iid}/reconfigure", 202,
                                 json={"parameters": {"fail_host": w2}}).json()["id"])
    assert op["status"] == "failed" and op["error"]["code"] == "run_failed"
    assert f"failed on {w2}" in op["error"]["message"]
    statuses = {m["node_name"]: m for m in members(ops, iid)}
    assert statuses[w2]["status"] == "failed"
    assert f"task 'Fail on the host asked for' failed on {w2}: planned failure on {w2}" in statuses[w2]["status_reason"]
    assert {statuses[n]["status"] for n in statuses if n != w2} == {"active"}  # the others keep their state
    got = instance(ops, iid)
    assert got["status"] == "degraded" and got["parameters"]["fail_host"] == w2  # the others got the new config
    failed_events = [e for e in events(ops, iid) if e["type"] == "member_failed"]
    assert len(failed_events) == 1  # the reason is said once, on the member it belongs to


def test_a_run_that_fails_every_host_of_a_play_is_not_a_partial_failure(ops):
    # Ansible ends the playbook, silently, after a play in which every host failed: the later plays never ran
    # anywhere, so no member may be taken for one that ran to the end.
    iid, nodes, _ = deployed(ops, "everyhost")
    ops.start_worker()
    op = wait_op(ops, ops.w.call(SA, "POST", f"/v1/instances/{iid}/reconfigure", 202,
                                 json={"parameters": {"fail_host": "every-member"}}).json()["id"])
    assert op["status"] == "failed" and op["error"]["code"] == "run_failed"
    assert "failed_hosts" not in (op.get("outcome") or {}), op["outcome"]
    assert instance(ops, iid)["status"] != "degraded"

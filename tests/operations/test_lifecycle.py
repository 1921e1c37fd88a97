"""Deploy and member operations end to end through the API and a worker: real ansible-runner runs of
the test app's playbook (tests/apps/opsapp) on localhost, no Slurm here. Statuses follow the runs, the
timeline carries run summaries and lifecycle events, the inventory and variables reach the playbook."""

from __future__ import annotations

import io
import json
import tarfile

import yaml

from .helpers import events, instance_secrets, make_instance, members, publish_test_app, wait_for, wait_op

SA = "service_account"


def post(ops, path: str, expect: int = 202, **kw) -> dict:
    return ops.w.call(SA, "POST", path, expect, **kw).json()


def log_lines(marker) -> list[list[str]]:
    return [line.split() for line in (marker / "log").read_text().splitlines()]


def test_deploy_then_member_operations_follow_the_runs(ops):
    instance, marker = make_instance(ops, "life")
    iid = instance["id"]
    ops.start_worker()
    op = post(ops, f"/v1/instances/{iid}/deploy")
    assert op["status"] == "queued" and op["kind"] == "deploy" and op["correlation_id"]
    op = wait_op(ops, op["id"])
    assert op["status"] == "succeeded", op
    assert ops.w.call(SA, "GET", f"/v1/instances/{iid}", 200).json()["status"] == "running"
    assert {m["status"] for m in members(ops, iid)} == {"active"}
    types = [e["type"] for e in events(ops, iid)]
    for expected in ("operation.queued", "apps.instance.starting", "member_joining", "run.playbook_started",
                     "run.task_started", "run.task_ok", "run.playbook_stats", "member_added", "start_completed",
                     "apps.instance.running", "operation.succeeded"):
        assert expected in types, expected
    assert types.index("start_completed") < types.index("apps.instance.running")
    assert "healthy" not in types  # claimed by no run: only a health check reads it
    ok = next(e for e in events(ops, iid, type="run.task_ok"))
    assert set(ok["payload"]) == {"host", "task", "play", "changed", "duration"}
    assert ok["correlation_id"] == op["correlation_id"]

    # the run got the inventory and vars: one host per member node name, groups from the profile
    runs = ops.settings.state_dir / "runs" / op["id"] / "attempt-1"
    inventory = json.loads((runs / "inventory" / "hosts.json").read_text())
    names = sorted(m["node_name"] for m in members(ops, iid))
    assert sorted(inventory["all"]["hosts"]) == names
    assert inventory["all"]["hosts"][names[0]]["ansible_host"].startswith("10.77.")
    assert set(inventory["all"]["children"]) == {"test_controller", "test_workers"}
    assert len(inventory["all"]["children"]["test_workers"]["hosts"]) == 2
    assert (marker / "munge.key").read_text() == instance_secrets(ops, iid)["munge_key"]

    # member add: a pending member now, joining in the run (listed in the workers group), active after.
    # A worker claims an accepted operation at once: a running reconfigure holds the queue, so the
    # add waits behind it and its member is seen pending.
    (marker / "slow").touch()
    held = post(ops, f"/v1/instances/{iid}/reconfigure", json={"parameters": {}})
    wait_for(lambda: log_lines(marker)[-1][:2] == ["start", "reconfigure"], 60, what="the reconfigure to run")
    add = post(ops, f"/v1/instances/{iid}/members",
               json={"role": "worker", "allocation_id": ops.ids["alloc_ops"]})
    new_id = add["member_ids"][0]
    assert next(m for m in members(ops, iid) if m["id"] == new_id)["status"] == "pending"
    (marker / "slow").unlink()
    assert wait_op(ops, held["id"])["status"] == "succeeded"
    assert wait_op(ops, add["id"])["status"] == "succeeded"
    new = next(m for m in members(ops, iid) if m["id"] == new_id)
    assert new["status"] == "active"
    assert log_lines(marker)[-2][:3] == ["start", "member_add", new["node_name"]]
    inventory = json.loads((ops.settings.state_dir / "runs" / add["id"] / "attempt-1" / "inventory" /
                            "hosts.json").read_text())
    assert new["node_name"] in inventory["all"]["children"]["test_workers"]["hosts"]

    worker = next(m for m in members(ops, iid) if m["role"] == "worker" and m["id"] != new_id)
    base = f"/v1/instances/{iid}/members/{worker['id']}"
    assert wait_op(ops, post(ops, base + "/drain")["id"])["status"] == "succeeded"
    assert next(m for m in members(ops, iid) if m["id"] == worker["id"])["status"] == "drained"
    assert wait_op(ops, post(ops, base + "/resume")["id"])["status"] == "succeeded"
    assert next(m for m in members(ops, iid) if m["id"] == worker["id"])["status"] == "active"

    # remove: the leaving member is in the inventory for its run, removed afterwards
    remove = post(ops, base + "/remove")
    assert wait_op(ops, remove["id"])["status"] == "succeeded"
    inventory = json.loads((ops.settings.state_dir / "runs" / remove["id"] / "attempt-1" / "inventory" /
                            "hosts.json").read_text())
    assert worker["node_name"] in inventory["all"]["children"]["test_workers"]["hosts"]
    assert next(m for m in members(ops, iid) if m["id"] == worker["id"])["status"] == "removed"
    assert "member_removed" in [e["type"] for e in events(ops, iid, member_id=worker["id"])]

    # replace: new joins, old drained then removed; the playbook got old/new names
    old = next(m for m in members(ops, iid) if m["id"] == new_id)
    replace = post(ops, f"/v1/instances/{iid}/members/{old['id']}/replace",
                   json={"allocation_id": ops.ids["alloc_ops2"]})
    assert wait_op(ops, replace["id"])["status"] == "succeeded"
    by_id = {m["id"]: m for m in members(ops, iid)}
    replacement = by_id[replace["member_ids"][1]]
    assert replacement["status"] == "active" and by_id[old["id"]]["status"] == "removed"
    assert log_lines(marker)[-2][:5] == ["start", "member_replace", "-", old["node_name"], replacement["node_name"]]
    old_types = [e["type"] for e in events(ops, iid, member_id=old["id"])]
    assert old_types[-4:] == ["member_draining", "member_drained", "member_removing", "member_removed"]

    # upgrade to 1.1.0 and roll back to 1.0.0 (the version's extra vars reach the run)
    v2 = publish_test_app(ops.w, "1.1.0")
    up = post(ops, f"/v1/instances/{iid}/upgrade", json={"app_version_id": v2["id"]})
    assert wait_op(ops, up["id"])["status"] == "succeeded"
    assert ops.w.call(SA, "GET", f"/v1/instances/{iid}", 200).json()["app_version"] == "1.1.0"
    assert yaml.safe_load((ops.settings.state_dir / "runs" / up["id"] / "attempt-1" / "vars.yml").read_text()
                          .replace("!unsafe ", ""))["app_version"] == "1.1.0"
    back = post(ops, f"/v1/instances/{iid}/rollback")
    assert wait_op(ops, back["id"])["status"] == "succeeded"
    assert ops.w.call(SA, "GET", f"/v1/instances/{iid}", 200).json()["app_version"] == "1.0.0"

    # decommission: stopping -> stopped, every member removed, then the record can be deleted
    down = post(ops, f"/v1/instances/{iid}/decommission")
    assert wait_op(ops, down["id"])["status"] == "succeeded"
    assert ops.w.call(SA, "GET", f"/v1/instances/{iid}", 200).json()["status"] == "stopped"
    assert {m["status"] for m in members(ops, iid)} == {"removed"}
    types = [e["type"] for e in events(ops, iid)]
    assert types.index("apps.instance.deleting") < types.index("apps.instance.stopped")
    assert "apps.instance.deleted" in types
    ops.w.call(SA, "DELETE", f"/v1/instances/{iid}", 204)

    # artifacts: a tar.gz of the run dir with ansible-runner's artifacts under the correlation id
    blob = ops.w.call(SA, "GET", f"/v1/operations/{op['id']}/artifacts", 200).content
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        names = tar.getnames()
    assert f"artifacts/{op['correlation_id']}/stdout" in names and "inventory/hosts.json" in names


def test_failed_deploy_is_failed_with_the_task_and_host_and_can_be_retried(ops):
    instance, marker = make_instance(ops, "broken", fail_step="deploy")
    ops.start_worker()
    op = wait_op(ops, post(ops, f"/v1/instances/{instance['id']}/deploy")["id"])
    assert op["status"] == "failed" and op["error"]["code"] == "run_failed"
    assert "Fail on purpose" in op["error"]["message"] and "localhost" in op["error"]["message"]
    assert "planned failure in deploy" in op["error"]["message"]
    got = ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()
    assert got["status"] == "failed" and "Fail on purpose" in got["status_reason"]
    assert {m["status"] for m in members(ops, instance["id"])} == {"failed"}
    types = [e["type"] for e in events(ops, instance["id"])]
    assert "run.task_failed" in types and "member_failed" in types and "apps.instance.failed" in types
    assert "apps.instance.running" not in types

    # The cause is fixed; deploying again (the playbooks are idempotent) brings the instance up.
    (marker / "fixed").touch()
    retry = wait_op(ops, post(ops, f"/v1/instances/{instance['id']}/deploy")["id"])
    assert retry["status"] == "succeeded", retry
    assert ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()["status"] == "running"
    assert {m["status"] for m in members(ops, instance["id"])} == {"active"}


def test_refresh_applies_the_status_modules_member_states(ops, local_hosts):
    """The status module is a test double (no scheduler here) that answers in the platform's words;
    the run is a real ad-hoc ansible-runner run on localhost. A word that is not a member status, or
    a member the module does not name, counts as failed."""
    instance, marker = make_instance(ops, "fresh", workers=3)
    iid = instance["id"]
    ops.start_worker()
    assert wait_op(ops, post(ops, f"/v1/instances/{iid}/deploy")["id"])["status"] == "succeeded"
    workers = sorted((m for m in members(ops, iid) if m["role"] == "worker"), key=lambda m: m["node_name"])
    (marker / "nodes.json").write_text(json.dumps({workers[0]["node_name"]: "drained",
                                                   workers[1]["node_name"]: "fell over"}))
    ops.sql("""UPDATE app_versions SET adapter = jsonb_set(adapter, '{status,options}',
               jsonb_build_object('path', %s::text)) RETURNING id""", (str(marker / "nodes.json"),))
    op = wait_op(ops, post(ops, f"/v1/instances/{iid}/refresh")["id"])
    assert op["status"] == "succeeded", op
    status = {m["id"]: m["status"] for m in members(ops, iid)}
    assert status[workers[0]["id"]] == "drained"
    assert status[workers[1]["id"]] == "failed"
    assert status[workers[2]["id"]] == "failed"  # not named by the status module
    assert "refresh_completed" in [e["type"] for e in events(ops, iid)]

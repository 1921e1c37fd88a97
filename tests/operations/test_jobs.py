"""Jobs, nodes and logins through the platform (docs/scheduler.md), on the test app: its runs are real
ansible-runner runs (the access map they get is written down by its playbook), and its scheduler is the toy one
on loopback (toy_scheduler.py), which checks every call's signature, audience and claims as a real gateway does.
Slurm's own gateway and access playbook are tested on real hosts (tests/e2e/test_api_slurm_jobs.py)."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .helpers import make_instance, running_with_scheduler_key, wait_for, wait_op
from .toy_scheduler import ToyScheduler, point_at

SA, PM, PADM, TA = "service_account", "project_member", "project_admin", "tenant_admin"
SCRIPT = "#!/bin/sh\nsrun hostname\n"


def ssh_key(comment: str = "alice@laptop") -> str:
    key = Ed25519PrivateKey.generate().public_key()
    return f"{key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()} {comment}"


def principal_id(ops, actor: str) -> str:
    return ops.w.call(actor, "GET", "/v1/me", 200).json()["id"]


def access_syncs(ops, iid: str) -> list[dict]:
    ops_list = ops.w.call(SA, "GET", f"/v1/instances/{iid}/operations", 200, params={"limit": 200}).json()["items"]
    return [o for o in ops_list if o["kind"] == "access_sync"]


def test_the_access_map_follows_bindings_and_keys_through_access_sync_runs(ops, local_hosts):
    instance, marker = make_instance(ops, "access")
    iid = instance["id"]
    ops.start_worker()
    deploy = ops.w.call(SA, "POST", f"/v1/instances/{iid}/deploy", 202).json()
    assert wait_op(ops, deploy["id"])["status"] == "succeeded"
    first = json.loads((marker / "access.json").read_text())
    project = ops.w.call(SA, "GET", f"/v1/projects/{ops.ids['project_a1']}", 200).json()
    assert first["accounts"] == [{"name": project["name"], "project_id": ops.ids["project_a1"]}]
    by_principal = {i["principal"]: i for i in first["identities"]}
    sa, pm = f"service_account:{principal_id(ops, SA)}", f"user:{principal_id(ops, PM)}"
    assert by_principal[sa]["login"] is False and by_principal[sa]["ssh_keys"] == []  # submits, never logs in
    assert by_principal[pm]["login"] is True and by_principal[pm]["account"] == project["name"]
    assert all(i["uid"] >= 200001 for i in first["identities"])
    identities = first["identities"]
    assert len({i["uid"] for i in identities}) == len({i["name"] for i in identities}) == len(identities)
    assert f"user:{principal_id(ops, 'other_project_member')}" not in by_principal  # another project's person

    # A key the member registers reaches the map with the access_sync the platform queues by itself.
    key = ops.w.call(PM, "POST", "/v1/me/ssh-keys", 201, json={"name": "laptop", "public_key": ssh_key()}).json()
    assert key["fingerprint"].startswith("SHA256:")
    (sync,) = access_syncs(ops, iid)
    assert wait_op(ops, sync["id"])["status"] == "succeeded"
    after_key = {i["principal"]: i for i in json.loads((marker / "access.json").read_text())["identities"]}
    assert after_key[pm]["ssh_keys"] == [key["public_key"]] and after_key[pm]["uid"] == by_principal[pm]["uid"]
    # The map an operator gets for a run by hand is the one the platform's run applied.
    assert ops.w.call(SA, "GET", f"/v1/instances/{iid}/access-map", 200).json() == json.loads(
        (marker / "access.json").read_text())
    access = ops.w.call(PM, "GET", f"/v1/instances/{iid}/access", 200).json()
    assert access["username"] == after_key[pm]["name"] and access["ssh_keys"] == 1 and access["synced"] is True

    # Unbinding the member queues the sync that takes their identity (and so their login) away.
    binding = next(b for b in ops.w.call(TA, "GET", "/v1/role-bindings", 200,
                                         params={"project_id": ops.ids["project_a1"]}).json()["items"]
                   if f"user:{b['principal_id']}" == pm)
    ops.w.call(TA, "DELETE", f"/v1/role-bindings/{binding['id']}", 204)
    revoke = next(o for o in access_syncs(ops, iid) if o["id"] != sync["id"])
    assert wait_op(ops, revoke["id"])["status"] == "succeeded"
    revoked = {i["principal"] for i in json.loads((marker / "access.json").read_text())["identities"]}
    assert pm not in revoked and sa in revoked
    ops.w.call(PM, "GET", f"/v1/instances/{iid}/access", 404)  # no binding left: the project is out of sight


def test_ssh_keys_are_checked_and_kept_as_one_canonical_line(ops):
    for bad in ("ssh-ed25519", "ssh-dss AAAAB3NzaC1kc3M= x", "command=\"sh\" " + ssh_key(),
                ssh_key() + "\nssh-ed25519 AAAA second", "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ== wrong-type",
                "ssh-ed25519 not*base64"):
        error = ops.w.call(PM, "POST", "/v1/me/ssh-keys", 422, json={"name": "bad", "public_key": bad}).json()["error"]
        assert error["code"] in ("invalid_ssh_key", "validation_error"), (bad, error)
    line = ssh_key("  a comment  ")
    stored = ops.w.call(PM, "POST", "/v1/me/ssh-keys", 201, json={"name": "k1", "public_key": f"  {line}  "}).json()
    assert stored["public_key"] == " ".join(line.split())
    again = ops.w.call(PM, "POST", "/v1/me/ssh-keys", 409, json={"name": "k2", "public_key": line}).json()
    assert again["error"]["code"] == "already_exists"
    assert ops.w.call(SA, "GET", "/v1/me/ssh-keys", 403).json()["error"]["code"] == "forbidden"
    ops.w.call(PM, "DELETE", f"/v1/me/ssh-keys/{stored['id']}", 204)
    assert ops.w.call(PM, "GET", "/v1/me/ssh-keys", 200).json()["items"] == []


@pytest.fixture
def toy_instance(ops):
    """A running test-app instance served by a toy scheduler (its key is the instance's own secret)."""
    instance, _ = make_instance(ops, "jobs")
    key = running_with_scheduler_key(ops, instance["id"])
    with ToyScheduler(key, instance["id"], nodes=["n1", "n2"]) as toy:
        point_at(ops.sql, instance["id"], toy.port)
        yield instance["id"], toy


def test_jobs_run_as_the_callers_identity_in_the_projects_account_and_are_scoped_to_it(ops, toy_instance):
    iid, toy = toy_instance
    jobs = f"/v1/instances/{iid}/jobs"
    mine = ops.w.call(SA, "POST", jobs, 201, json={"name": "train", "script": SCRIPT,
                                                   "resources": {"nodes": 2, "gpus": 1}}).json()
    theirs = ops.w.call(PM, "POST", jobs, 201, json={"name": "eval", "script": SCRIPT}).json()
    project = ops.w.call(SA, "GET", f"/v1/projects/{ops.ids['project_a1']}", 200).json()
    assert mine["owner"] == {"kind": "service_account", "id": principal_id(ops, SA)}
    assert mine["project_id"] == ops.ids["project_a1"] and mine["account"] == project["name"]
    assert mine["resources"]["nodes"] == 2 and mine["state"] == "pending"
    # The toy saw a signed call naming the caller's identity and the project's account alone.
    method, path, claims = toy.requests[0]
    assert (method, path, claims["accounts"], claims["aud"]) == ("POST", "/v1/jobs", [project["name"]], iid)
    assert claims["sub"] == mine["runtime_user"] and claims["exp"] - claims["iat"] <= 60
    # Only what the caller set goes to the runtime: a default would override the script's own #SBATCH lines.
    assert toy.bodies[0] == {"name": "train", "script": SCRIPT, "resources": {"nodes": 2, "gpus": 1},
                             "account": project["name"]}
    # A reader acts as nobody: no runtime identity is claimed (or created) for a list.
    ops.w.call(PM, "GET", jobs, 200)
    assert "sub" not in toy.requests[-1][2]

    # Another account is refused by the API before the runtime hears of it.
    calls = len(toy.requests)
    refused = ops.w.call(SA, "POST", jobs, 403, json={"name": "x", "script": SCRIPT, "account": "research"}).json()
    assert refused["error"]["code"] == "account_not_allowed" and len(toy.requests) == calls
    # A job of another account on the same runtime is not the project's: not listed, not found, not cancelled.
    toy.jobs[1] = {**mine, "id": "1", "account": "someone-else", "user": "intruder"}
    listed = ops.w.call(SA, "GET", jobs, 200).json()["items"]
    assert [j["id"] for j in listed] == [theirs["id"], mine["id"]]
    assert [j["id"] for j in ops.w.call(SA, "GET", jobs, 200, params={"mine": True}).json()["items"]] == [mine["id"]]
    ops.w.call(SA, "GET", f"{jobs}/1", 404)
    ops.w.call(SA, "POST", f"{jobs}/1/cancel", 404)
    toy.filter_accounts = False  # a gateway that answers too much: the platform still shows only the project's jobs
    assert "1" not in [j["id"] for j in ops.w.call(SA, "GET", jobs, 200).json()["items"]]
    assert ops.w.call(SA, "GET", f"{jobs}/1", 404).json()["error"]["code"] == "not_found"
    toy.filter_accounts = True
    ops.w.call("other_service_account", "GET", jobs, 404)  # another project cannot see the instance at all

    cancelled = ops.w.call(PM, "POST", f"{jobs}/{mine['id']}/cancel", 200).json()
    assert cancelled["state"] == "cancelled"
    assert ops.w.call(SA, "GET", f"{jobs}/{mine['id']}", 200).json()["state"] == "cancelled"
    audit = ops.w.call(TA, "GET", "/v1/audit", 200, params={"project_id": ops.ids["project_a1"]}).json()["items"]
    actions = {(a["action"], a["target_id"]) for a in audit}
    assert ("scheduler.job.submit", f"{iid}/{mine['id']}") in actions
    assert ("scheduler.job.cancel", f"{iid}/{mine['id']}") in actions


def test_job_lists_page_newest_first_with_a_cursor(ops, toy_instance):
    iid, _ = toy_instance
    ids = [ops.w.call(SA, "POST", f"/v1/instances/{iid}/jobs", 201, json={"name": f"j{n}", "script": SCRIPT})
           .json()["id"] for n in range(5)]
    seen, cursor = [], None
    while True:
        page = ops.w.call(SA, "GET", f"/v1/instances/{iid}/jobs", 200,
                          params={"limit": 2} | ({"cursor": cursor} if cursor else {})).json()
        assert len(page["items"]) <= 2
        seen += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == ids[::-1]
    assert ops.w.call(SA, "GET", f"/v1/instances/{iid}/jobs", 400, params={"cursor": "bm9wZQ=="}).json()[
        "error"]["code"] == "invalid_cursor"


def test_nodes_are_read_by_the_project_and_operated_with_node_operate_alone(ops, toy_instance):
    iid, toy = toy_instance
    nodes = ops.w.call(PM, "GET", f"/v1/instances/{iid}/nodes", 200).json()["items"]
    assert [n["name"] for n in nodes] == ["n1", "n2"]
    ops.w.call(PM, "POST", f"/v1/instances/{iid}/nodes/n1/drain", 403, json={"reason": "mine"})
    drained = ops.w.call(SA, "POST", f"/v1/instances/{iid}/nodes/n1/drain", 200, json={"reason": "bad DIMM"}).json()
    assert drained["state"] == "drained" and drained["reason"] == "gpuaas: bad DIMM"
    event = wait_for(lambda: [e for e in ops.w.call(SA, "GET", f"/v1/instances/{iid}/events", 200,
                                                    params={"type": "scheduler.node.drain"}).json()["items"]])[0]
    assert event["payload"]["node"] == "n1" and event["payload"]["by"]["kind"] == "service_account"
    assert ops.w.call(SA, "POST", f"/v1/instances/{iid}/nodes/n1/resume", 200).json()["state"] == "idle"
    featured = ops.w.call(SA, "POST", f"/v1/instances/{iid}/nodes/n2/features", 200, json={"features": ["a100"]}).json()
    assert featured["features"] == ["a100"]
    assert ops.w.call(SA, "POST", f"/v1/instances/{iid}/nodes/zz/resume", 404).json()["error"]["code"] == "not_found"


def test_a_caller_not_yet_on_the_runtime_or_a_silent_gateway_gets_a_clear_answer(ops, toy_instance):
    iid, toy = toy_instance
    toy.users = set()  # as before the access sync that adds the caller has run
    error = ops.w.call(SA, "POST", f"/v1/instances/{iid}/jobs", 409, json={"name": "x", "script": SCRIPT}).json()
    assert error["error"]["code"] == "identity_not_synced"
    toy.__exit__()
    error = ops.w.call(SA, "GET", f"/v1/instances/{iid}/jobs", 502).json()["error"]
    assert error["code"] == "scheduler_unavailable" and "127.0.0.1" in error["message"]

"""`gpuaas shared ...` and `gpuaas instances access-drift`, run as their own process against the service over
real HTTP (the client CLI tests' world), on a tenant-shared runtime of the test app whose scheduler is the toy one
(tests/operations/toy_scheduler.py, a test double of a runtime's gateway)."""

from __future__ import annotations

import json

from operations.helpers import TEST_APP, running_with_scheduler_key
from operations.toy_scheduler import ToyScheduler, point_at

from cli import conftest as cli_fixtures
from cli.test_jobs import table
from cli.test_login_and_reads import error_line

app, ops, op_settings, served, cli = (cli_fixtures.app, cli_fixtures.ops, cli_fixtures.op_settings,
                                      cli_fixtures.served, cli_fixtures.cli)
_no_stray_env = cli_fixtures._no_stray_env

TA = "tenant_admin"


def test_a_tenant_admin_attaches_grants_and_reads_the_split_and_the_drift(ops, cli):
    ta = ops.w.tokens[TA]
    ops.w.call("platform_admin", "POST", f"/v1/projects/{ops.ids['project_a2']}/entitlements", 201,
               json={"app_slug": TEST_APP})
    instance = ops.w.call(TA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 201, json={
        "name": "shared", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops"]],
        "control_plane_scope": "tenant", "attachable_project_ids": [ops.ids["project_a2"]],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}]}).json()
    key = running_with_scheduler_key(ops, instance["id"])

    # The runtime's gateway is a toy one: a revoke asks it for the jobs it would end, the drift for its accounting.
    with ToyScheduler(key, instance["id"], nodes=["n1"]) as toy:
        point_at(ops.sql, instance["id"], toy.port)
        attached = cli("shared", "attach", "shared", "project-a2", "--reason", "vision joins", token=ta)
        rows = table(attached)
        assert rows[0] == ["RUNTIME", "PROJECT", "ACCOUNT", "OWNER", "STATUS", "SINCE"]
        assert rows[1][:5] == ["shared", "project-a2", "project-a2", "-", "attached"]
        assert "1 operation(s) queued" in attached.stderr
        assert [r[:5] for r in table(cli("shared", "attachments", "shared", token=ta))[1:]] == [
            ["shared", "project-a1", "project-a1", "yes", "attached"], ["shared", "project-a2", "project-a2", "-",
                                                                        "attached"]]
        theirs = json.loads(cli("shared", "attachments", "--project", "project-a2", "-o", "json",
                                token=ops.w.tokens["other_project_admin"]).stdout)
        assert [(a["instance_id"], a["account"]) for a in theirs] == [(instance["id"], "project-a2")]
        code, _, status, _ = error_line(cli("shared", "attach", "shared", "project-a2", "--reason", "again", token=ta))
        assert (code, status) == ("already_attached", 409)
        assert cli("shared", "attach", "shared", "project-a2", token=ta).returncode == 2  # --reason is required

        granted = cli("shared", "grant", "shared", "--service-account", "project-a1/operator", "--into", "project-a2",
                      "--reason", "shared benchmark", "-o", "json", token=ta)
        grant = json.loads(granted.stdout)
        assert (grant["principal_name"], grant["account"]) == ("operator", "project-a2"), granted.stderr
        assert [r[:3] for r in table(cli("shared", "grants", "shared", token=ta))[1:]] == [
            ["operator", "service_account", "project-a2"]]
        # One grant, one attachment (issue 27: every route has a verb); ids by any unique start.
        assert [r[-1] for r in table(cli("shared", "grants", "shared", grant["id"][:8], token=ta))[1:]] == [grant["id"]]
        assert [r[:5] for r in table(cli("shared", "attachments", "shared", "project-a2", token=ta))[1:]] == [
            ["shared", "project-a2", "project-a2", "-", "attached"]]
        assert table(cli("shared", "revoke", "shared", grant["id"][:8], token=ta))[1][0] == "operator"
        assert table(cli("shared", "grants", "shared", token=ta)) == [
            ["PRINCIPAL", "KIND", "INTO", "ACCOUNT", "REASON", "SINCE", "ID"]]
        missing = cli("shared", "grant", "shared", "--service-account", "project-a1/nobody", "--into", "project-a2",
                      "--reason", "x", token=ta)
        assert missing.returncode == 1 and "has no service account named nobody" in missing.stderr

        split = table(cli("shared", "billing", "shared", token=ta))
        assert split[0] == ["NODE", "ROLE", "STATUS", "CHARGED", "TO", "AS"]
        assert {r[-1] for r in split[1:3]} == {"tenant_shared_owner"}

        drift = cli("instances", "access-drift", "shared", token=ta)
        assert drift.returncode == 1 and "missing account: project-a1" in drift.stdout
        assert "gpuaas instances access-sync shared" in drift.stderr
        intent = ops.w.call(TA, "GET", f"/v1/instances/{instance['id']}/access-map", 200).json()
        toy.accounts = [{"name": a["name"], "description": f"gpuaas project {a['project_id']}", "parent": "root"}
                        for a in intent["accounts"]]
        toy.associations = [{"account": account, "user": i["name"]} for i in intent["identities"]
                            for account in i["accounts"]]
        synced = cli("instances", "access-drift", "shared", "-o", "json", token=ta)
        assert synced.returncode == 0 and json.loads(synced.stdout)["in_sync"] is True
        assert all(c.get("accounting") is True for _, path, c in toy.requests if path == "/v1/accounting")

"""`gpuaas apps smoke` (issue 29 item 2): a publisher who runs instances in a project smoke-tests a draft version of
the test app there with its own token, run as its own process against the served app, with a real worker running
the test app's playbook (tests/apps/opsapp, real ansible-runner runs on localhost): --wait follows the gate to its
end; a pass makes the version canary, a deploy that fails keeps it draft and exits 1 with the run's reason."""

from __future__ import annotations

import json

from operations.helpers import TEST_APP

PA = "platform_admin"


def draft(w, version: str) -> dict:
    """A draft version of the test app on the active 1.0.0's build."""
    active = w.call(PA, "GET", f"/v1/catalog/apps/{TEST_APP}/versions/1.0.0", 200).json()
    return w.call(PA, "POST", f"/v1/catalog/apps/{TEST_APP}/versions", 201, json={
        "version": version, "artifact_id": active["artifact_id"], "compatibility": active["compatibility"],
        "adapter": active["adapter"], "runtime_profile": active["runtime_profile"]}).json()


def test_a_publisher_smoke_tests_a_draft_version_from_the_cli(ops, cli):
    w = ops.w
    user = w.call(PA, "POST", f"/v1/tenants/{w.ids['tenant_a']}/users", 201,
                  json={"email": "smoke@tenant-a.example.com"}).json()
    for binding in ({"role": "catalog_publisher"}, {"role": "project_admin", "project_id": w.ids["project_a1"]}):
        w.call(PA, "POST", "/v1/role-bindings", 201, json={"principal_kind": "user", "principal_id": user["id"]}
               | binding)
    token = w.call(PA, "POST", f"/v1/users/{user['id']}/tokens", 201, json={"name": "cli"}).json()["token"]
    ops.start_worker()
    markers = ops.marker_root / "smoke"
    markers.mkdir()
    smoke = ("apps", "smoke", TEST_APP)
    where = ("--project", "project-a1", "--allocation", "alloc-ops2", "--topology", "controller=1",
             "--topology", "worker=1", "--param", f"marker_dir={markers}", "--reason", "before canary")

    draft(w, "1.1.0")
    failed = cli(*smoke, "1.1.0", *where, "--param", "fail_step=deploy", "--wait", token=token)
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    lines = failed.stdout.strip().splitlines()
    assert lines[0].startswith("smoke gate ") and " instance smoke-1-1-0-" in lines[0], lines
    assert lines[-1].startswith("failed: deploy failed, decommission succeeded (deploy failed: "), lines
    assert w.call(PA, "GET", f"/v1/catalog/apps/{TEST_APP}/versions/1.1.0", 200).json()["status"] == "draft"

    draft(w, "1.2.0")
    passed = cli(*smoke, "1.2.0", *where, "--wait", "-o", "json", token=token)
    assert passed.returncode == 0, (passed.stdout, passed.stderr)
    gate = json.loads(passed.stdout)
    assert gate["status"] == "passed" and gate["smoke"]["promoted"], gate
    assert [(o["kind"], o["status"]) for o in gate["smoke"]["operations"]] == [("deploy", "succeeded"),
                                                                                ("decommission", "succeeded")]
    assert w.call(PA, "GET", f"/v1/catalog/apps/{TEST_APP}/versions/1.2.0", 200).json()["status"] == "canary"
    # Torn down, the smoke instance is deleted (out of the project's quota); its operations stay readable.
    assert gate["smoke"]["instance_deleted"], gate
    w.call("project_admin", "GET", f"/v1/instances/{gate['smoke']['instance_id']}", 404)
    ops_read = w.call("project_admin", "GET", f"/v1/instances/{gate['smoke']['instance_id']}/operations", 200).json()
    assert [o["status"] for o in ops_read["items"]] == ["succeeded", "succeeded"], ops_read

    # A tenant admin runs instances in the project but does not publish to the platform catalog.
    refused = cli(*smoke, "1.2.0", *where, token=w.tokens["tenant_admin"])
    assert refused.returncode != 0

"""`gpuaas apps promote --wait` (issue 29 items 2 and 5): a draft collection build asked to become staged starts its
staging gate, which a real worker runs (real ansible-lint and ansible-test); the command follows it and prints each
check and the failing rule with its path and line, and exits 1; `artifacts show`, `gates list` and `apps events`
show the same outcome. Run as its own process against the served app."""

from __future__ import annotations

import dataclasses
import json

from api.test_promotion_gates import SANITY_HOME, collection
from operations.helpers import TEST_APP

from .conftest import out

PA = "platform_admin"


def test_promote_wait_prints_the_failing_rule_and_keeps_the_build_draft(ops, cli, tmp_path):
    ops.settings = dataclasses.replace(ops.settings, promotion_sanity_home=SANITY_HOME)
    ops.start_worker()
    token = ops.w.tokens[PA]
    published = out(cli("apps", "publish", str(collection(tmp_path, "1.0.9", unnamed_task=True)), token=token))
    artifact = published.split(", artifact ")[1].split()[0]

    done = cli("apps", "promote", TEST_APP, "--artifact", artifact, "--to", "staged", "--wait",
               "--reason", "release 1.0.9", token=token)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "staging gate " in done.stdout and ": failed" in done.stdout
    assert "  ansible_lint: failed" in done.stdout and "  descriptor: passed" in done.stdout
    assert "    name[missing] playbooks/step.yml:16 All tasks should be named." in done.stdout, done.stdout

    shown = json.loads(out(cli("artifacts", "show", artifact, "-o", "json", token=token)))
    assert shown["status"] == "draft" and [g["status"] for g in shown["gates"]] == ["failed"]
    listed = out(cli("gates", "list", TEST_APP, "--status", "failed", token=token))
    assert shown["gates"][0]["id"] in listed
    timeline = json.loads(out(cli("apps", "events", TEST_APP, "--artifact", artifact, "-o", "json", token=token)))
    assert [e["type"] for e in timeline] == ["gate.started", "gate.failed"]
    # A move by hand past the gate is the platform admin's, and says so.
    skipped = out(cli("apps", "promote", TEST_APP, "--artifact", artifact, "--to", "staged", "--skip-gates",
                      "--reason", "our CI ran the checks", token=token))
    assert skipped.strip() == f"{TEST_APP} artifact {artifact}: staged"

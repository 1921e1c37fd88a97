"""The instance verbs of issue 27 (item 1) against the service over real HTTP: `instances create`, `update`,
`inventory`, the lifecycle operations (`deploy`, `reconfigure`, `upgrade`, `rollback`, `refresh`, `decommission`)
and `delete`, `members show`; tables, -o json and -o yaml, and an empty list. No worker runs here: each operation
is checked queued as the service took it (kind, body), then canceled; tests/cli/test_operations.py follows the
real runs, refresh and decommission included."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import yaml
from operations.helpers import TEST_APP, publish_test_app, running_with_scheduler_key

from .conftest import out, rows

SA = "service_account"




def test_instances_are_created_changed_operated_and_deleted_from_the_cli(ops, cli, tmp_path):
    w, token = ops.w, ops.w.tokens[SA]
    publish_test_app(w, "2.0.0")  # the upgrade's target
    marker = tmp_path / "marker"

    # create: the service account's own project by default, its allocation by name, roles and parameters typed.
    created = cli("instances", "create", "made", "--app", TEST_APP, "--version", "1.0.0", "--allocation", "alloc-ops",
                  "--role", "controller=1", "--role", "worker=1", "--param", f"marker_dir={marker}",
                  "--param", "round=0", "--param", "message={{ 6 * 7 }}", "--label", "team=ml", token=token)
    header, row = rows(created)
    assert header == ["NAME", "STATUS", "APP", "VERSION", "MEMBERS", "PROJECT", "ID"]
    assert row[:4] == ["made", "created", TEST_APP, "1.0.0"] and row[-2] == ops.ids["project_a1"]
    made = w.call(SA, "GET", f"/v1/instances/{row[-1]}", 200).json()
    assert made["parameters"] == {"marker_dir": str(marker), "round": 0, "message": "{{ 6 * 7 }}"}
    assert made["labels"] == {"team": "ml"}
    assert [(r["name"], r["desired_count"]) for r in made["topology"]["roles"]] == [("controller", 1), ("worker", 1)]

    shown = yaml.safe_load(out(cli("instances", "show", "made", "-o", "yaml", token=token)))
    assert shown["id"] == made["id"] and shown["labels"] == {"team": "ml"} and len(shown["members"]) == 2

    updated = cli("instances", "update", "made", "--label", "tier=gold", "--remove-label", "team", "-o", "json",
                  token=token)
    assert json.loads(updated.stdout)["labels"] == {"tier": "gold"}, updated.stderr

    inventory = cli("instances", "inventory", made["id"][:8], "-o", "json", token=token)
    assert inventory.returncode == 0, inventory.stderr
    assert json.loads(inventory.stdout) == w.call(SA, "GET", f"/v1/instances/{made['id']}/inventory", 200).json()
    # As an inventory file, a tenant's text stays text: Ansible itself reads it and templates nothing of it.
    playbook_inventory = tmp_path / "inventory.yml"
    playbook_inventory.write_text(out(cli("instances", "inventory", "made", token=token)))
    shown = subprocess.run([str(Path(sys.executable).parent / "ansible"), "all", "-i", str(playbook_inventory), "-c",
                            "local", "-m", "ansible.builtin.debug", "-a", "var=message"],
                           capture_output=True, text=True, timeout=120)
    assert '"message": "{{ 6 * 7 }}"' in shown.stdout and "42" not in shown.stdout, shown.stdout + shown.stderr

    member = w.call(SA, "GET", f"/v1/instances/{made['id']}/members", 200, params={"role": "worker"}).json()["items"][0]
    fields = dict(line.split(None, 1) for line in out(cli("members", "show", "made", member["node_name"],
                                                          token=token)).splitlines())
    assert (fields["id"], fields["role"], fields["status"]) == (member["id"], "worker", "pending"), fields

    def queued(*argv: str) -> dict:
        """The operation a --no-wait verb queued (-o json), canceled again by its short id."""
        done = cli("instances", *argv, "--no-wait", "-o", "json", token=token)
        assert done.returncode == 0, done.stderr
        op = json.loads(done.stdout)
        assert op["status"] == "queued", op
        assert cli("ops", "cancel", op["id"][:8], token=token).returncode == 0
        return op

    assert queued("deploy", "made")["kind"] == "deploy"
    key = running_with_scheduler_key(ops, made["id"])  # as a deploy leaves it
    # The variables a run outside the platform needs beyond the inventory, into a file only its owner reads.
    secrets = cli("instances", "run-secrets", "made", token=token, cwd=tmp_path)
    assert secrets.returncode == 0 and key not in secrets.stdout + secrets.stderr, secrets.stderr
    written = tmp_path / "made-run-secrets.yml"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert f"!unsafe 'scheduler_key': !unsafe '{key}'" in written.read_text()  # never templated by -e @FILE
    assert cli("instances", "run-secrets", "made", token=token, cwd=tmp_path).returncode == 1  # not replaced
    reconfigure = queued("reconfigure", "made", "--param", "round=2")
    assert reconfigure["kind"] == "reconfigure" and '"round": 2' in json.dumps(reconfigure["params"]), reconfigure
    upgrade = queued("upgrade", "made", "--version", "2.0.0")
    version = w.call(SA, "GET", f"/v1/catalog/apps/{TEST_APP}/versions/2.0.0", 200).json()
    assert upgrade["kind"] == "upgrade" and version["id"] in json.dumps(upgrade["params"]), upgrade
    assert queued("refresh", "made")["kind"] == "refresh"
    assert queued("decommission", "made")["kind"] == "decommission"
    # No upgrade ran: nothing to roll back to. The service's refusal, as every refusal, in one line.
    rollback = cli("instances", "rollback", "made", token=token)
    assert rollback.returncode == 1 and rollback.stderr.startswith("gpuaas: no_previous_version: "), rollback.stderr
    refused = cli("instances", "delete", "made", token=token)
    assert refused.returncode == 1 and "(HTTP 409, " in refused.stderr, refused.stderr

    # delete: an instance that runs nothing.
    gone = json.loads(out(cli("instances", "create", "gone", "--app", TEST_APP, "--allocation", "alloc-ops2",
                              "--param", f"marker_dir={marker}", "-o", "json", token=token)))
    deleted = cli("instances", "delete", gone["id"][:6], token=token)
    assert (deleted.returncode, deleted.stdout) == (0, f"deleted instance {gone['id'][:6]}\n"), deleted.stderr
    names = [i["name"] for i in json.loads(out(cli("instances", "list", "-o", "json", token=token)))]
    assert "made" in names and "gone" not in names

    # An empty list: the headers alone, exit 0 (as kubectl and awx print it).
    empty = cli("instances", "list", "--status", "failed", token=token)
    assert (empty.returncode, empty.stdout.split()) == (0, ["NAME", "STATUS", "APP", "VERSION", "MEMBERS", "ID"])
    assert yaml.safe_load(out(cli("instances", "list", "--status", "failed", "-o", "yaml", token=token))) == []

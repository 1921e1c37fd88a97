"""The client's `jobs`, `nodes`, `keys` and `instances access|access-sync` commands: their arguments and the
request bodies they build, then `gpuaas` run as its own process against the service over real HTTP (the
client CLI tests' world, tests/cli/conftest.py), with a real worker deploying the test app and the toy scheduler
(tests/operations/toy_scheduler.py, a test double of a runtime's gateway) answering the jobs and nodes routes."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from console.scheduler_world import scheduled_instance
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gpuaas_api.cli import build_parser
from gpuaas_api.commands import jobs, nodes
from operations.helpers import wait_for

from cli import conftest as cli_fixtures
from cli.test_login_and_reads import error_line

# The client CLI tests' fixtures (over tests/api's: the operations world, served over HTTP, `gpuaas` as a process).
app, ops, op_settings, served, cli = (cli_fixtures.app, cli_fixtures.ops, cli_fixtures.op_settings,
                                      cli_fixtures.served, cli_fixtures.cli)
_no_stray_env = cli_fixtures._no_stray_env

SA, MEMBER, ADMIN = "service_account", "project_member", "project_admin"
JOB_HEADER = ["ID", "NAME", "STATE", "USER", "ACCOUNT", "SUBMITTED", "STARTED", "ENDED", "REASON"]
NODE_HEADER = ["NAME", "STATE", "REASON", "CPUS", "MEMORY", "GPUS", "FEATURES", "PARTITIONS"]
KEY_HEADER = ["NAME", "FINGERPRINT", "TYPE", "CREATED", "ID"]


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        parse(*argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_submit_builds_its_body_from_the_script_and_the_flags_given(tmp_path, monkeypatch, capsys):
    script = tmp_path / "train v2.sbatch"
    script.write_text("#!/bin/bash\nsrun hostname\n")
    args = parse("jobs", "submit", "hpc", str(script), "--nodes", "2", "--tasks", "8", "--cpus-per-task", "4",
                 "--gpus", "0", "--mem-mb", "16000", "--time", "90", "--partition", "gpu", "--workdir", "/scratch/x")
    assert jobs.submit_body(args) == {
        "name": "train-v2", "script": "#!/bin/bash\nsrun hostname\n", "working_directory": "/scratch/x",
        "resources": {"nodes": 2, "tasks": 8, "cpus_per_task": 4, "gpus": 0, "memory_mb": 16000,
                      "time_limit_minutes": 90, "partition": "gpu"}}
    # Nothing given: the service's defaults, not the client's.
    assert jobs.submit_body(parse("jobs", "submit", "hpc", str(script), "--name", "mine")) == {
        "name": "mine", "script": "#!/bin/bash\nsrun hostname\n", "resources": {}}
    # - reads standard input, and the job is called stdin unless named.
    monkeypatch.setattr("sys.stdin.read", lambda: "#!/bin/sh\ntrue\n")
    assert jobs.submit_body(parse("jobs", "submit", "hpc", "-"))["name"] == "stdin"
    assert [jobs.default_name(p) for p in ("a/b/.hidden.sh", "x/résumé.sh", "/tmp/__.sh", "-")] == [
        "hidden", "r-sum-", "job", "stdin"]

    for bad in (["--nodes", "0"], ["--gpus", "-1"], ["--time", "soon"]):
        assert "is not a whole number" in refused(capsys, "jobs", "submit", "hpc", str(script), *bad)
    assert "is more than 500" in refused(capsys, "jobs", "list", "hpc", "--limit", "501")
    assert "invalid choice: 'done'" in refused(capsys, "jobs", "list", "hpc", "--state", "done")
    # A job id or node name is one path segment of the request, as the service takes them.
    for ref in ("..", "1/../../nodes", "a b"):
        assert "is not a job id or node name" in refused(capsys, "jobs", "cancel", "hpc", ref)
        assert "is not a job id or node name" in refused(capsys, "nodes", "resume", "hpc", ref)
    assert "--reason" in refused(capsys, "nodes", "drain", "hpc", "n1")


def test_node_operations_send_what_the_route_takes():
    def body(*argv):
        return nodes.operation_body(parse("nodes", *argv))

    assert body("drain", "hpc", "n1", "--reason", "bad DIMM") == {"reason": "bad DIMM"}
    assert body("resume", "hpc", "n1") == {}
    assert body("features", "hpc", "n1", "a100", "nvlink") == {"features": ["a100", "nvlink"]}
    assert body("features", "hpc", "n1", "--clear") == {"features": []}
    from gpuaas_api.client.errors import ClientError

    for argv in (("features", "hpc", "n1"), ("features", "hpc", "n1", "a100", "--clear")):
        with pytest.raises(ClientError, match="or pass --clear"):
            body(*argv)


def identity(ops, actor: str) -> str:
    (row,) = ops.sql("SELECT name FROM runtime_identities WHERE principal_id = %s", (ops.ids[f"user_{actor}"],))
    return row["name"]


def table(done: subprocess.CompletedProcess) -> list[list[str]]:
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines()]


def test_jobs_and_nodes_through_the_instances_scheduler(ops, cli, tmp_path):
    member, admin = ops.w.tokens[MEMBER], ops.w.tokens[ADMIN]
    with scheduled_instance(ops, "hpc") as (instance, toy, _):
        # No job yet: the header alone, exit 0.
        assert table(cli("jobs", "list", "hpc", token=member)) == [JOB_HEADER]
        assert json.loads(cli("jobs", "list", "hpc", "-o", "json", token=member).stdout) == []

        script = tmp_path / "train.sh"
        script.write_text("#!/bin/sh\nsrun hostname\n")
        done = cli("jobs", "submit", "hpc", str(script), "--nodes", "2", "--gpus", "1", "--time", "30",
                   "--partition", "main", token=member)
        assert done.returncode == 0, done.stderr
        (first,) = toy.jobs.values()
        user = identity(ops, MEMBER)
        assert (first["name"], first["user"], first["account"]) == ("train", user, "project-a1")
        # only what was asked for reaches the runtime (the script's own #SBATCH lines decide the rest)
        assert first["resources"] == {"nodes": 2, "gpus": 1, "time_limit_minutes": 30, "partition": "main"}
        assert done.stdout.splitlines() == [
            "submitted to hpc:", f"job {first['id']}  train", "  state      pending",
            "  reason     Resources", f"  user       {user} (user {ops.ids['user_project_member']})",
            "  account    project-a1", "  submitted  2026-11-25T10:00:00Z", "  started    -", "  ended      -",
            "  resources  nodes=2 gpus=1 time_limit_minutes=30 partition=main",
            "  exit code  -"]

        # From standard input, by another user of the project, as JSON.
        done = cli("jobs", "submit", instance["id"], "-", "--name", "eval", "--mem-mb", "4096", "-o", "json",
                   token=admin, stdin="#!/bin/bash\necho hi\n")
        assert done.returncode == 0, done.stderr
        second = json.loads(done.stdout)
        assert second["name"] == "eval" and second["resources"]["memory_mb"] == 4096
        assert second["owner"] == {"kind": "user", "id": ops.ids["user_project_admin"]}

        # Newest first; --mine; a page of one names what is left; --all follows next_cursor to the end.
        rows = table(cli("jobs", "list", "hpc", token=member))
        assert [r[:4] for r in rows[1:]] == [[second["id"], "eval", "pending", identity(ops, ADMIN)],
                                             [first["id"], "train", "pending", user]]
        assert [r[0] for r in table(cli("jobs", "list", "hpc", "--mine", token=member))[1:]] == [first["id"]]
        one = cli("jobs", "list", "hpc", "--limit", "1", token=member)
        assert [r[0] for r in table(one)[1:]] == [second["id"]]
        assert one.stderr.strip() == "gpuaas: there are more jobs than the 1 shown: --all lists every page"
        pages = len(toy.requests)
        every = cli("jobs", "list", "hpc", "--all", "--limit", "1", "-o", "json", token=member)
        assert [j["id"] for j in json.loads(every.stdout)] == [second["id"], first["id"]] and every.stderr == ""
        assert [r[:2] for r in toy.requests[pages:]] == [("GET", "/v1/jobs")] * 2
        assert table(cli("jobs", "list", "hpc", "--state", "running", token=member)) == [JOB_HEADER]

        shown = cli("jobs", "show", "hpc", first["id"], token=member)
        assert shown.returncode == 0 and shown.stdout.splitlines()[0] == f"job {first['id']}  train"
        cancelled = cli("jobs", "cancel", "hpc", first["id"], token=member)
        assert cancelled.stdout.strip() == f"job {first['id']} (train): cancel requested; now cancelled", cancelled
        assert toy.jobs[int(first["id"])]["state"] == "cancelled"
        shown = json.loads(cli("jobs", "show", "hpc", first["id"], "-o", "json", token=member).stdout)
        assert (shown["state"], shown["ended_at"]) == ("cancelled", "2026-11-25T10:01:00Z")

        # Refusals: the envelope in one line, exit 1; nothing reaches the scheduler for a script it cannot take.
        code, message, status, _ = error_line(cli("jobs", "show", "hpc", "99999", token=member))
        assert (code, status, message) == ("not_found", 404, 'no job 99999 {"gateway_code":"not_found"}')
        (script := tmp_path / "plain.txt").write_text("srun hostname\n")
        code, message, status, _ = error_line(cli("jobs", "submit", "hpc", str(script), token=member))
        assert (code, status) == ("validation_error", 422) and "must start with #!" in message
        missing = cli("jobs", "submit", "hpc", str(tmp_path / "nope.sh"), token=member)
        assert missing.returncode == 1 and missing.stderr.strip() == (
            f"gpuaas: cannot read {tmp_path / 'nope.sh'}: No such file or directory")
        assert len(toy.jobs) == 2

        # Nodes: a member reads them; operating them takes scheduler.node.operate (the project admin's).
        rows = table(cli("nodes", "list", "hpc", token=member))
        assert rows == [NODE_HEADER, ["n1", "idle", "-", "4", "8192", "MB", "1", "-", "main"],
                        ["n2", "idle", "-", "4", "8192", "MB", "1", "-", "main"]]
        code, message, status, _ = error_line(cli("nodes", "drain", "hpc", "n1", "--reason", "bad DIMM", token=member))
        assert (code, status) == ("forbidden", 403) and "scheduler.node.operate" in message
        drained = cli("nodes", "drain", "hpc", "n1", "--reason", "bad DIMM", token=admin)
        assert drained.stdout.strip() == "node n1: drained (IDLE+DRAIN), reason gpuaas: bad DIMM; features none"
        assert table(cli("nodes", "list", "hpc", token=member))[1][:4] == ["n1", "drained", "gpuaas:", "bad"]
        assert cli("nodes", "resume", "hpc", "n1", token=admin).stdout.strip() == "node n1: idle; features none"
        labelled = json.loads(cli("nodes", "features", "hpc", "n2", "a100", "nvlink", "-o", "json", token=admin).stdout)
        assert labelled["features"] == toy.nodes["n2"]["features"] == ["a100", "nvlink"]
        assert table(cli("nodes", "list", "hpc", token=member))[2][7] == "a100,nvlink"
        assert "features none" in cli("nodes", "features", "hpc", "n2", "--clear", token=admin).stdout
        assert toy.nodes["n2"]["features"] == []
        both = cli("nodes", "features", "hpc", "n2", "x", "--clear", token=admin)
        assert both.returncode == 1 and "or pass --clear" in both.stderr
        code, _, status, _ = error_line(cli("nodes", "resume", "hpc", "n9", token=admin))
        assert (code, status) == ("not_found", 404)
        # Every node operation the toy saw came from the project admin's identity, with node_operate.
        operated = [claims for method, path, claims in toy.requests
                    if method == "POST" and path.startswith("/v1/nodes")]
        assert len(operated) == 5 and all("sub" not in c and c["node_operate"] for c in operated)  # acts as nobody


def public_key_files(tmp_path, name: str):
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH).decode() + f" {name}@test"
    (tmp_path / name).write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                        serialization.NoEncryption()))
    (tmp_path / f"{name}.pub").write_text(public + "\n")
    return tmp_path / name, tmp_path / f"{name}.pub", public


def test_ssh_keys_are_listed_added_and_removed(ops, cli, tmp_path):
    member = ops.w.tokens[MEMBER]
    assert table(cli("keys", "list", token=member)) == [KEY_HEADER]
    assert json.loads(cli("keys", "list", "-o", "json", token=member).stdout) == []

    private, public_file, public = public_key_files(tmp_path, "laptop")
    added = cli("keys", "add", "laptop", str(public_file), token=member)
    (key,) = ops.w.call(MEMBER, "GET", "/v1/me/ssh-keys", 200).json()["items"]
    assert key["public_key"] == public
    assert added.returncode == 0 and added.stdout.strip() == (
        f"added key laptop {key['fingerprint']} (id {key['id']}); the login hosts of your running instances "
        "follow with the access sync this queued")
    # A private key never leaves the machine.
    oops = cli("keys", "add", "oops", str(private), token=member)
    assert oops.returncode == 1 and oops.stderr.strip() == (
        f"gpuaas: {private} holds a private key: pass the public key (the .pub file); nothing was sent")
    _, _, desk = public_key_files(tmp_path, "desk")
    desk_key = json.loads(cli("keys", "add", "desk", "-", "-o", "json", token=member, stdin=desk).stdout)
    assert desk_key["name"] == "desk" and desk_key["public_key"] == desk
    code, _, status, _ = error_line(cli("keys", "add", "laptop", str(public_file), token=member))
    assert (code, status) == ("already_exists", 409)
    (tmp_path / "junk.pub").write_text("ssh-ed25519 not-base64!\n")
    code, _, status, _ = error_line(cli("keys", "add", "junk", str(tmp_path / "junk.pub"), token=member))
    assert (code, status) == ("invalid_ssh_key", 422)

    rows = table(cli("keys", "list", token=member))
    assert [r[0] for r in rows[1:]] == ["laptop", "desk"] and rows[1][1:3] == [key["fingerprint"], "ssh-ed25519"]
    # By name, then by a start of its id.
    assert cli("keys", "remove", "desk", token=member).stdout.startswith("removed key desk ")
    removed = json.loads(cli("keys", "remove", key["id"][:8], "-o", "json", token=member).stdout)
    assert removed["id"] == key["id"]
    assert ops.w.call(MEMBER, "GET", "/v1/me/ssh-keys", 200).json()["items"] == []
    gone = cli("keys", "remove", "desk", token=member)
    assert gone.returncode == 1 and gone.stderr.strip() == "gpuaas: you have no SSH key named desk"
    # Keys are people's: a service account has none.
    code, message, status, _ = error_line(cli("keys", "list", token=ops.w.tokens[SA]))
    assert (code, status) == ("forbidden", 403) and "SSH keys belong to people" in message


def operations_done(ops, instance_id: str) -> bool:
    listed = ops.w.call(SA, "GET", f"/v1/instances/{instance_id}/operations", 200).json()["items"]
    return all(op["status"] in ("succeeded", "failed", "canceled") for op in listed)


def test_access_prints_the_ssh_logins_and_access_sync_follows_its_run(ops, cli, tmp_path):
    member = ops.w.tokens[MEMBER]
    with scheduled_instance(ops, "login") as (instance, _, marker):
        shown = cli("instances", "access", "login", token=member)
        assert shown.returncode == 0, shown.stderr
        user = identity(ops, MEMBER)
        # stdout: the ssh lines alone (the controller is the login host; the toy's world puts it on loopback).
        assert shown.stdout == f"ssh {user}@127.0.0.1\n"
        (uid,) = ops.sql("SELECT uid FROM runtime_identities WHERE name = %s", (user,))
        assert shown.stderr.splitlines() == [
            f"gpuaas: you are {user} (uid {uid['uid']}), charged to account project-a1",
            "gpuaas: you have no SSH key registered: gpuaas keys add NAME FILE"]

        # A key queues an access sync on the running instance; once it ran, the login is there.
        _, public_file, public = public_key_files(tmp_path, "laptop")
        assert cli("keys", "add", "laptop", str(public_file), token=member).returncode == 0
        wait_for(lambda: operations_done(ops, instance["id"]), 90, 0.3, "the access sync")
        shown = cli("instances", "access", instance["id"][:8], "-o", "json", token=member)
        access = json.loads(shown.stdout)
        assert access == {"username": user, "uid": uid["uid"], "account": "project-a1", "ssh_keys": 1, "synced": True,
                          "login_hosts": [{"node_name": access["login_hosts"][0]["node_name"],
                                           "address": "127.0.0.1", "port": 22}]}

        # access-sync follows its run to the end; the run got the member's login with its key.
        synced = cli("instances", "access-sync", "login", token=ops.w.tokens[SA])
        assert synced.returncode == 0, synced.stderr
        assert re.match(r"^access_sync accepted: operation [0-9a-f-]{36} ", synced.stdout), synced.stdout
        assert re.match(r"^access_sync succeeded in ", synced.stdout.strip().splitlines()[-1]), synced.stdout
        handed = json.loads((marker / "access.json").read_text())
        (mine,) = [i for i in handed["identities"] if i["name"] == user]
        assert mine["login"] is True and mine["ssh_keys"] == [public] and mine["account"] == "project-a1"

        # Only people log in: no service account's role holds the login permission.
        code, message, status, _ = error_line(cli("instances", "access", "login", token=ops.w.tokens[SA]))
        assert (code, status) == ("forbidden", 403) and "apps.instance.access" in message

    # An app that declares no logins and no scheduler (the slurm version of this world, stripped of both in the
    # catalog's row): a clear refusal for each command.
    ops.sql("""UPDATE app_versions SET adapter = adapter - 'access' - 'scheduler'
                WHERE id = (SELECT app_version_id FROM app_instances WHERE id = %s) RETURNING id""",
            (ops.ids["instance_a1"],))
    code, message, status, _ = error_line(cli("instances", "access", "slurm-a1", token=member))
    assert (code, status, message) == ("no_login", 409, "this instance's app has no logins (its adapter declares "
                                                        "no access)")
    for argv in (("jobs", "list", "slurm-a1"), ("nodes", "list", "slurm-a1")):
        code, message, status, _ = error_line(cli(*argv, token=member))
        assert (code, status) == ("no_scheduler", 409) and "serves no jobs or nodes" in message

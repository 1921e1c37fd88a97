"""The client's operation commands against the control service over real HTTP with a real worker
running the test app's playbook (tests/apps/opsapp, real ansible-runner runs on localhost): `deploy`
and `members add|drain|resume|replace|remove` follow each run to its end and exit with its result,
`ops list|show|follow|cancel`, `events tail --follow`, the live panel on a terminal, and a failed
run's task, message and correlation id."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import tarfile
import termios
import threading
import time

from gpuaas_api.demo import Api, Demo
from operations.helpers import make_instance, members

from .conftest import GPUAAS

SA = "service_account"
ACCEPTED = re.compile(r"^(\w+) accepted: operation ([0-9a-f-]{36}) \(correlation_id ([0-9a-f-]{36})\)$")
TIME = r"\d+(?:s|m\d\ds|h\d\dm)"  # an elapsed time as the client prints it: 9s, 1m05s, 2h03m
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]")


def accepted(output: str) -> tuple[str, str, str]:
    match = ACCEPTED.match(output.splitlines()[0])
    assert match, output
    return match[1], match[2], match[3]


def succeeded(done: subprocess.CompletedProcess, kind: str, out: str | None = None) -> str:
    """The operation's id, after checking the command followed it to success."""
    out = done.stdout if out is None else out
    assert done.returncode == 0, (done.stdout, done.stderr)
    got_kind, op_id, _ = accepted(out)
    assert got_kind == kind
    summary = out.strip().splitlines()[-1]
    # The test app's playbook runs on localhost and, in a play of its own, on the member hosts.
    match = re.fullmatch(rf"{kind} succeeded in {TIME}: (\d+)/(\d+) tasks on \d+ hosts?", summary)
    assert match and match[1] == match[2] and int(match[1]) >= 5, summary
    return op_id


def by_id(ops, instance_id: str) -> dict[str, dict]:
    return {m["id"]: m for m in members(ops, instance_id)}


def test_deploy_and_member_operations_are_followed_to_their_end(ops, cli):
    instance, _ = make_instance(ops, "life", workers=1)
    token = ops.w.tokens[SA]
    ops.start_worker()
    # Started as a terminal starts it, with ^C's default action: a child keeps an ignored SIGINT across exec, and
    # a shell starts its background jobs (a CI run sent to the background, say) with SIGINT ignored.
    tail = cli.popen("events", "tail", "life", "--follow", "-n", "1", token=token,
                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    streamed, tail_errors, readers = [], [], []
    try:
        first_line = tail.stdout.readline()  # the timeline so far was read: what follows comes from the stream
        assert first_line.split()[2] == "apps.instance.requested", first_line
        # Read as it prints (a terminal would): the command never waits on a full pipe, and what it printed
        # is kept even if another process of this test inherited the pipe and holds it open.
        for source, sink in ((tail.stdout, streamed), (tail.stderr, tail_errors)):
            reader = threading.Thread(target=lambda source=source, sink=sink: sink.extend(iter(source.readline, "")),
                                      daemon=True)
            reader.start()
            readers.append(reader)
        deploy = cli("deploy", "life", token=token)
        deploy_id = succeeded(deploy, "deploy")
        lines = deploy.stdout.splitlines()
        assert re.search(rf"^ +{TIME}  started \(attempt 1, ", deploy.stdout, re.M), deploy.stdout
        assert re.search(rf"^ +{TIME}  \[\d+/\d+\] ok localhost: Record the start$", deploy.stdout, re.M), lines
        assert re.search(rf"^ +{TIME}  succeeded$", deploy.stdout, re.M)
        assert ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()["status"] == "running"
        deployed = by_id(ops, instance["id"])
        assert {m["status"] for m in deployed.values()} == {"active"} and len(deployed) == 2

        # add (by allocation name), with the finished operation as JSON on stdout and progress on stderr
        add = cli("members", "add", "life", "--role", "worker", "--allocation", "alloc-ops", "-o", "json", token=token)
        assert add.returncode == 0, add.stderr
        assert json.loads(add.stdout)["status"] == "succeeded" and json.loads(add.stdout)["kind"] == "member_add"
        succeeded(add, "member_add", out=add.stderr)
        (new,) = set(by_id(ops, instance["id"])) - set(deployed)
        new_member = by_id(ops, instance["id"])[new]
        assert new_member["status"] == "active" and new_member["role"] == "worker"
        # The new worker shares its host with the controller: the host name names two members.
        ambiguous = cli("members", "drain", "life", new_member["host_name"], token=token)
        assert ambiguous.returncode == 1 and ambiguous.stderr.startswith(
            f"gpuaas: {new_member['host_name']} names several members of life: "), ambiguous.stderr

        succeeded(cli("members", "drain", "life", new, token=token), "member_drain")
        assert by_id(ops, instance["id"])[new]["status"] == "drained"

        # --no-wait: the id only; the same Idempotency-Key gives the same operation; `ops follow` then.
        first = cli("members", "resume", "life", new, "--no-wait", "--idempotency-key", "resume-1", token=token)
        again = cli("members", "resume", "life", new, "--no-wait", "--idempotency-key", "resume-1", token=token)
        assert first.returncode == again.returncode == 0 and first.stdout == again.stdout
        resume_id = first.stdout.strip()
        followed = cli("ops", "follow", resume_id, token=token)
        assert followed.returncode == 0, followed.stderr
        assert re.fullmatch(rf"member_resume succeeded in {TIME}: (\d+)/\1 tasks on \d+ hosts?",
                            followed.stdout.strip().splitlines()[-1]), followed.stdout
        assert by_id(ops, instance["id"])[new]["status"] == "active"
        shown = cli("ops", "show", resume_id, token=token)
        assert shown.returncode == 0, shown.stderr
        fields = dict(re.findall(r"^  (\w+) +(.*)$", shown.stdout, re.M))
        assert fields["kind"] == "member_resume" and fields["status"] == "succeeded"
        tasks = re.fullmatch(r"(\d+)/\1 on (.+)", fields["tasks"])
        assert fields["attempt"] == "1 of 2" and tasks and "localhost" in tasks[2].split(", "), fields
        progress = json.loads(cli("ops", "show", resume_id, "-o", "json", token=token).stdout)["progress"]
        assert progress["failure"] is None and progress["done"] == progress["started"] > 0

        succeeded(cli("members", "replace", "life", new, "--allocation", "alloc-ops2", token=token), "member_replace")
        after = by_id(ops, instance["id"])
        assert after[new]["status"] == "removed"
        (newest,) = set(after) - set(deployed) - {new}
        assert after[newest]["status"] == "active" and after[newest]["host_name"].startswith("alloc-ops2-")
        # by its node name, unique now
        succeeded(cli("members", "remove", "life", after[newest]["node_name"], token=token), "member_remove")
        assert by_id(ops, instance["id"])[newest]["status"] == "removed"

        # A refusal: the service's envelope in one line, exit status 1.
        again = cli("deploy", "life", token=token)
        assert again.returncode == 1 and re.fullmatch(r"gpuaas: instance_already_deployed: .*it is running.* "
                                                      r"\(HTTP 409, correlation_id [0-9a-f-]{36}\)",
                                                      again.stderr.strip()), again.stderr

        listed = cli("ops", "list", "life", token=token)
        rows = [line.split() for line in listed.stdout.splitlines()]
        assert rows[0] == ["OPERATION", "KIND", "STATUS", "ATTEMPT", "CREATED", "FINISHED"]
        assert [(r[1], r[2]) for r in rows[1:]] == [(k, "succeeded") for k in (
            "deploy", "member_add", "member_drain", "member_resume", "member_replace", "member_remove")]
        assert rows[1][0] == deploy_id

        # `events tail --follow` printed the timeline as it grew, until interrupted.
        tail.send_signal(signal.SIGINT)
        tail.wait(timeout=30)
    finally:
        if tail.poll() is None:
            tail.kill()
    assert tail.returncode == 130, tail_errors
    for reader in readers:  # each ends at its pipe's end, or has read all there is by then
        reader.join(timeout=10)
    out = "".join(streamed)
    events = [line.split(None, 3) for line in (first_line + out).splitlines()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", e[0]) and e[1].isdigit() for e in events), out
    types = [e[2] for e in events]
    assert types[0] == "apps.instance.requested" and types.count("operation.succeeded") == 6, types
    ids = [int(e[1]) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    recent = cli("events", "tail", "life", "-n", "2", "--type", "operation.succeeded", "-o", "json", token=token)
    assert [json.loads(line)["payload"]["kind"] for line in recent.stdout.splitlines()] == ["member_replace",
                                                                                            "member_remove"]

    # The deploy's run directory as the service keeps it (by the short id the output prints), then the end of the
    # lifecycle for real: decommission (followed to its end), delete.
    archive = cli.home / "deploy.tar.gz"
    fetched = cli("ops", "artifacts", deploy_id[:8], "--file", str(archive), token=token)
    assert fetched.returncode == 0 and fetched.stdout.startswith(f"{archive}: "), fetched.stderr
    with tarfile.open(archive) as tar:
        assert any(name.endswith("inventory/hosts.json") for name in tar.getnames()), tar.getnames()
    succeeded(cli("instances", "decommission", "life", token=token), "decommission")
    assert ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()["status"] == "stopped"
    deleted = cli("instances", "delete", "life", token=token)
    assert (deleted.returncode, deleted.stdout) == (0, "deleted instance life\n"), deleted.stderr
    ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 404)


def run_on_terminal(args: list[str], env: dict, until: str, timeout: float = 120) -> tuple[subprocess.Popen, int, str]:
    """`args` with a pseudo-terminal as stdin/stdout/stderr (120x30); returns once `until` was printed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    process = subprocess.Popen(args, env=env | {"TERM": "xterm-256color"}, stdin=follower, stdout=follower,
                               stderr=follower, start_new_session=True)
    os.close(follower)
    seen = read_terminal(leader, process, lambda text: until in text, timeout)
    return process, leader, seen


def read_terminal(leader: int, process: subprocess.Popen, done, timeout: float, seen: str = "") -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done(ANSI.sub("", seen)):
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command exited
                break
            if not chunk:
                break
            seen += chunk.decode(errors="replace")
        elif process.poll() is not None:
            break
    return seen


def test_a_failed_run_names_its_task_and_a_terminal_shows_the_live_panel(ops, cli, tmp_path):
    token = ops.w.tokens[SA]
    broken, broken_marker = make_instance(ops, "broken", workers=1, fail_step="deploy")
    _, slow_marker = make_instance(ops, "slow", workers=1, allocation="alloc_ops2")
    ops.start_worker(concurrency=2)

    # On a terminal: the live panel while the run works (it waits on the slow file) ...
    (slow_marker / "slow").touch()
    env = cli.env(GPUAAS_API=cli.url, GPUAAS_TOKEN=token)
    deploy, terminal, seen = run_on_terminal([GPUAAS, "deploy", "slow"], env, "Work while the slow file exists")
    try:
        screen = ANSI.sub("", seen)
        _, slow_op, slow_cid = accepted(screen.lstrip())
        assert re.search(rf"deploy +[0-9a-f]{{8}}  running  {TIME}", screen), screen
        assert re.search(r"tasks +\d+/\d+ ", screen) and f"correlation {slow_cid}" in screen, screen
        assert re.search(r"hosts +localhost  Work while the slow file exists", screen), screen

        # ... meanwhile another deploy fails: the failing task, its message and the correlation id.
        failed = cli("deploy", "broken", token=token)
        assert failed.returncode == 1, (failed.stdout, failed.stderr)
        _, op_id, correlation_id = accepted(failed.stdout)
        assert re.search(rf"^ +{TIME}  \[(\d+)/\1\] failed localhost: Fail on purpose: planned failure in deploy",
                         failed.stdout, re.M), failed.stdout
        assert re.fullmatch(rf"deploy failed in {TIME}: task 'Fail on purpose' failed on localhost: planned failure in "
                            rf"deploy \(run_failed, correlation_id {correlation_id}\)",
                            failed.stdout.strip().splitlines()[-1]), failed.stdout
        shown = cli("ops", "show", op_id, token=token)
        fields = dict(re.findall(r"^  (\w+) +(.*)$", shown.stdout, re.M))
        assert fields["status"] == "failed" and fields["correlation"] == correlation_id
        assert fields["error"].startswith("run_failed: task 'Fail on purpose' failed on localhost: planned failure")
        tasks = re.fullmatch(r"\d+/\d+ on (.+), 1 failed", fields["tasks"])
        assert tasks and "localhost" in tasks[1].split(", "), fields

        # The cause fixed, `gpuaas demo`'s step deploys it again and prints the run's progress the same way.
        (broken_marker / "fixed").touch()
        said: list[str] = []
        demo = Demo(say=said.append, state_dir=tmp_path / "demo")
        demo.sa, demo.ids["instance"] = Api(cli.url, token), broken["id"]
        assert demo.operate("/deploy", timeout=300)["status"] == "succeeded"
        assert re.fullmatch(r"-> deploy accepted \(operation [0-9a-f]{8}, correlation [0-9a-f-]{36}\)", said[0])
        assert any(re.fullmatch(rf" +{TIME}  \[\d+/\d+\] ok localhost: Record the end", line) for line in said), said
        assert re.fullmatch(rf"<- deploy succeeded in {TIME}: (\d+)/\1 tasks on \d+ hosts?", said[-1]), said

        # ... and the slow one, canceled, ends the command with exit status 3.
        canceled = cli("ops", "cancel", slow_op, token=token)
        assert canceled.stdout.strip() == f"deploy {slow_op}: running, cancel requested", canceled.stdout
        seen = read_terminal(terminal, deploy, lambda text: "deploy canceled in" in text, 120, seen)
        assert deploy.wait(timeout=60) == 3
    finally:
        (slow_marker / "slow").unlink(missing_ok=True)
        if deploy.poll() is None:
            deploy.kill()
        os.close(terminal)
    assert re.search(rf"deploy canceled in {TIME}: canceled while running; the run was stopped, hosts may be partly "
                     rf"changed \(canceled, correlation_id {slow_cid}\)", ANSI.sub("", seen)), seen[-2000:]

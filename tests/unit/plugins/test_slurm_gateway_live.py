"""The scheduler gateway against real Slurm on the live_slurm test host (see conftest.py): the role
gpuaas.apps.slurm_gateway installs it there through ansible-playbook (its systemd unit, on the cluster's
SLURM_CONF), and the test process calls it over HTTP, as the platform does, with tokens it signs itself. The
cluster enforces associations (AccountingStorageEnforce=associations), so Slurm itself refuses a job of an
account the user has no association with."""

import base64
import calendar
import hashlib
import hmac
import http.client
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import uuid
from functools import partial
from pathlib import Path

import live_ansible
import pytest
from gpuaas_api import testhosts

PROGRAM = Path(__file__).resolve().parents[3] / "roles/slurm_gateway/files/gpuaas_scheduler_gateway.py"
_spec = importlib.util.spec_from_file_location("gpuaas_scheduler_gateway", PROGRAM)
gw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gw)

PORT = 6830
KEY = "live-test-key-" + "0123456789abcdef" * 2  # a throwaway key for this test host only
INSTANCE = "live-instance-" + uuid.uuid4().hex[:8]
SCRIPT = "#!/bin/bash\nsleep 300\n"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(key=KEY, aud=None, age=0, lifetime=60, **claims):
    """A token as the platform signs it: each with a jti of its own, so each may be used once."""
    now = int(time.time()) - age
    body = {"iss": "gpuaas", "aud": aud or INSTANCE, "iat": now, "exp": now + lifetime, "jti": uuid.uuid4().hex,
            **claims}
    body = {k: v for k, v in body.items() if v is not None}
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64(json.dumps(body).encode())
    signature = b64(hmac.new(key.encode(), f"{head}.{payload}".encode(), hashlib.sha256).digest())
    return f"{head}.{payload}.{signature}"


def play(live, tmp_path, tasks_from, variables):
    """Runs the role (its `tasks_from` entry point) on the test host with ansible-playbook: (recap, task results)."""
    playbook = tmp_path / f"gateway-{tasks_from}.yml"
    playbook.write_text(json.dumps([{
        "hosts": "slurm", "gather_facts": False,
        "tasks": [{"ansible.builtin.include_role": {"name": "gpuaas.apps.slurm_gateway", "tasks_from": tasks_from}}],
    }]))
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=live_ansible.collections_path(), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_PIPELINING="1",
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(live.inventory), str(playbook), "-e", f"@{extra}"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert KEY not in proc.stdout + proc.stderr, "the key showed in ansible-playbook's output"
    output = json.loads(proc.stdout[proc.stdout.index("{"):])
    tasks = [task["hosts"]["slurm"] for p in output["plays"] for task in p["tasks"] if "slurm" in task["hosts"]]
    return output["stats"]["slurm"], tasks


class Gateway:
    """The gateway on the test host, called over HTTP from this process."""

    def __init__(self, live, address, users, accounts):
        self.live, self.address, self.users, self.accounts = live, address, users, accounts

    def call(self, method, path, bearer=None, body=None):
        """``bearer``: a token, or a function that signs a fresh one (a token is accepted once)."""
        bearer = bearer() if callable(bearer) else bearer
        conn = http.client.HTTPConnection(self.address, PORT, timeout=60)
        try:
            headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
            data = json.dumps(body) if body is not None else None
            if data is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def submit(self, user, account, accounts=None, script=SCRIPT, name="live-job", **extra):
        body = {"name": name, "script": script, "account": account, **extra}
        return self.call("POST", "/v1/jobs", token(sub=user, accounts=accounts or [account]), body)

    def squeue(self, job_id):
        """(user, account, state) of a job as Slurm itself shows it."""
        out = self.live.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%u|%a|%T").stdout.strip()
        return tuple(out.split("|")) if out else None

    def node_state(self, name):
        return next(n for n in self.call("GET", "/v1/nodes", token())[1]["items"] if n["name"] == name)["state"]

    def wait_for(self, job_id, state):
        deadline = time.monotonic() + 60
        while self.squeue(job_id)[2] != state:
            assert time.monotonic() < deadline, f"job {job_id} is not {state}: {self.squeue(job_id)}"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def gateway(live_slurm, tmp_path_factory):
    """Two platform identities, each associated with an account of its own, a user below the platform's uids, and
    the gateway installed by its role; all of it removed afterwards (the role's teardown included)."""
    live, suffix = live_slurm, uuid.uuid4().hex[:5]
    users = {"alice": f"gw-alice-{suffix}", "bob": f"gw-bob-{suffix}", "low": f"gw-low-{suffix}"}
    accounts = {"alice": f"gwa-{suffix}", "bob": f"gwb-{suffix}"}
    for (who, name), uid in zip(users.items(), (200701, 200702, 1701), strict=True):
        live.run("useradd", "-u", str(uid), "-U", "-m", "-s", "/bin/bash", name)
        if who in accounts:
            live.run("sacctmgr", "-i", "add", "account", accounts[who], "description=gateway live test")
            live.run("sacctmgr", "-i", "add", "user", name, f"account={accounts[who]}")
    tmp_path = tmp_path_factory.mktemp("gateway")
    variables = {"slurm_gateway_key": KEY, "slurm_gateway_instance_id": INSTANCE, "slurm_gateway_port": PORT,
                 "slurm_gateway_slurm_conf": live.conf}
    try:
        recap, tasks = play(live, tmp_path, "main", variables)
        assert recap["failures"] == 0 and recap["unreachable"] == 0, tasks
        assert recap["changed"] == 1, tasks
        started = Gateway(live, testhosts.host_address(live.container), users, accounts)
        started.tmp_path, started.variables = tmp_path, variables
        yield started
    finally:
        for name in users.values():
            live.run("scancel", "--full", "-u", name, check=False)
        live.run("scontrol", "update", f"nodename={live.node}", "state=resume", check=False)
        live.run("scontrol", "update", f"nodename={live.node}", "AvailableFeatures=a100,test",
                 "ActiveFeatures=a100,test", check=False)
        for who, account in accounts.items():
            live.run("sacctmgr", "-i", "remove", "user", users[who], check=False)
            live.run("sacctmgr", "-i", "remove", "account", account, check=False)
        for name in users.values():
            live.run("userdel", "-r", name, check=False)
        play(live, tmp_path, "teardown", variables)


@pytest.fixture
def gw_live(gateway):
    """The gateway; the test's jobs are cancelled (and gone from the node) and the node is back in service
    afterwards."""
    yield gateway
    live, users = gateway.live, ",".join(gateway.users.values())
    for name in gateway.users.values():
        live.run("scancel", "--full", "-u", name, check=False)
    if re.search(r"State=\S*(DRAIN|DOWN|FAIL)", live.run("scontrol", "show", "-o", "node", live.node).stdout):
        live.run("scontrol", "update", f"nodename={live.node}", "state=resume", check=False)
    deadline = time.monotonic() + 30
    while live.run("squeue", "-h", "-u", users, "-t", "PD,R,CG", "-o", "%i").stdout.strip():
        assert time.monotonic() < deadline, "the test's jobs did not end"
        time.sleep(0.2)


def test_the_role_runs_the_gateway_once_and_a_second_run_changes_nothing(gateway):
    live = gateway.live
    assert live.run("systemctl", "is-active", "gpuaas-scheduler-gateway").stdout.strip() == "active"
    assert live.run("stat", "-c", "%a %U", "/etc/gpuaas/scheduler.key").stdout.split() == ["600", "root"]
    pid = live.run("systemctl", "show", "-p", "MainPID", "--value", "gpuaas-scheduler-gateway").stdout.strip()
    recap, tasks = play(live, gateway.tmp_path, "main", gateway.variables)
    assert recap["failures"] == 0 and recap["changed"] == 0, tasks
    assert live.run("systemctl", "show", "-p", "MainPID", "--value", "gpuaas-scheduler-gateway").stdout.strip() == pid


def test_only_a_valid_token_for_this_instance_is_accepted(gateway):
    good = token()
    status, health = gateway.call("GET", "/v1/health", good)
    assert status == 200 and health == {"ok": True, "runtime": "slurm", "version": "22.05.8"}
    for bad in (None, "not.a.token", token(key="another key of at least thirty-two chars"), token(aud="elsewhere"),
                token(age=120, lifetime=60), token(age=400, lifetime=600), token(jti=None)):
        status, document = gateway.call("GET", "/v1/jobs", bad)
        assert status == 401 and document["error"]["code"] == "unauthorized", document
    # each token is used once: the same token again (a replay) is refused, a fresh one is not
    status, document = gateway.call("GET", "/v1/health", good)
    assert status == 401 and "used before" in document["error"]["message"], document
    assert gateway.call("GET", "/v1/health", token())[0] == 200
    log = gateway.live.run("journalctl", "-u", "gpuaas-scheduler-gateway", "--no-pager", "-o", "cat").stdout
    assert "GET /v1/health 200" in log and "GET /v1/jobs 401" in log
    assert KEY not in log and good.split(".")[2] not in log


def test_a_job_runs_as_its_user_in_its_account_and_slurm_refuses_another_account(gw_live):
    alice, bob = gw_live.users["alice"], gw_live.users["bob"]
    mine, theirs = gw_live.accounts["alice"], gw_live.accounts["bob"]
    script = "#!/bin/bash\necho \"$(id -un) $HOME $SLURM_JOB_ACCOUNT\" > whoami-$SLURM_JOB_ID.txt\n"
    status, job = gw_live.submit(alice, mine, script=script,
                                 resources={"nodes": 1, "tasks": 1, "cpus_per_task": 1, "gpus": 1, "memory_mb": 100,
                                            "time_limit_minutes": 5, "partition": "debug"})
    assert status == 201, job
    assert job["user"] == alice and job["account"] == mine and job["name"] == "live-job"
    assert job["resources"] == {"nodes": 1, "tasks": 1, "cpus_per_task": 1, "gpus": 1, "memory_mb": 100,
                                "time_limit_minutes": 5, "partition": "debug"}
    assert gw_live.squeue(job["id"])[:2] == (alice, mine)
    # it ran as alice, in her home (the default working directory), with her environment
    output = f"/home/{alice}/whoami-{job['id']}.txt"
    deadline = time.monotonic() + 60
    while gw_live.live.run("test", "-s", output, check=False).returncode != 0:
        assert time.monotonic() < deadline, f"job {job['id']} did not run: {gw_live.squeue(job['id'])}"
        time.sleep(0.3)
    assert gw_live.live.run("cat", output).stdout.split() == [alice, f"/home/{alice}", mine]
    assert gw_live.live.run("stat", "-c", "%U", output).stdout.strip() == alice

    # the token allows the account, but alice has no association with it: Slurm refuses, in its own words
    status, refused = gw_live.submit(alice, theirs, accounts=[mine, theirs])
    assert status == 403 and refused["error"]["code"] == "scheduler_refused", refused
    assert "Invalid account" in refused["error"]["message"]
    # the token does not allow the account: the gateway refuses before Slurm is asked
    status, refused = gw_live.submit(alice, theirs, accounts=[mine])
    assert status == 403 and refused["error"]["code"] == "forbidden"
    # a Slurm refusal that is not about the association: 502 with Slurm's words
    status, refused = gw_live.submit(alice, mine, resources={"partition": "nosuch"})
    assert status == 502 and "Invalid partition" in refused["error"]["message"], refused
    # no such user or a user below the platform's uids: unknown_identity (core's identity_not_synced); no sub at all
    for sub, code in (("gw-nobody", "unknown_identity"), (gw_live.users["low"], "unknown_identity"),
                      (None, "forbidden")):
        status, refused = gw_live.call("POST", "/v1/jobs", token(sub=sub, accounts=[mine]),
                                       {"name": "x", "script": SCRIPT, "account": mine})
        assert status == 403 and refused["error"]["code"] == code, (sub, refused)
    assert bob not in gw_live.live.run("squeue", "-h", "-o", "%u").stdout


def test_lists_show_only_the_claimed_accounts_newest_first_and_page(gw_live):
    alice, bob = gw_live.users["alice"], gw_live.users["bob"]
    mine, theirs = gw_live.accounts["alice"], gw_live.accounts["bob"]
    own = [gw_live.submit(alice, mine, name=f"live-job-{n}")[1]["id"] for n in range(5)]
    other = gw_live.submit(bob, theirs)[1]["id"]
    reader = partial(token, accounts=[mine])  # a platform read: no sub

    status, listed = gw_live.call("GET", "/v1/jobs", reader)
    assert status == 200
    ids = [job["id"] for job in listed["items"]]
    assert set(own) <= set(ids) and other not in ids
    assert {job["account"] for job in listed["items"]} == {mine}
    assert ids == sorted(ids, key=int, reverse=True)

    pages, before = [], None
    while True:
        status, page = gw_live.call("GET", "/v1/jobs?limit=2" + (f"&before={before}" if before else ""), reader)
        assert status == 200 and len(page["items"]) <= 2
        pages.append([job["id"] for job in page["items"]])
        before = page["next"]
        if before is None:
            break
    assert [i for p in pages for i in p] == ids and len(pages) == (len(ids) + 1) // 2

    gw_live.wait_for(own[0], "RUNNING")
    status, running = gw_live.call("GET", f"/v1/jobs?state=running&user={alice}", reader)
    assert status == 200 and running["items"] and all(j["state"] == "running" for j in running["items"])
    status, pending = gw_live.call("GET", "/v1/jobs?state=pending", reader)
    assert status == 200 and all(j["state"] == "pending" for j in pending["items"])
    assert set(own) <= {j["id"] for j in running["items"]} | {j["id"] for j in pending["items"]}

    status, theirs_listed = gw_live.call("GET", "/v1/jobs", token(accounts=[theirs]))
    assert [job["id"] for job in theirs_listed["items"]] == [other]
    status, nothing = gw_live.call("GET", "/v1/jobs", token(accounts=[]))
    assert status == 200 and nothing == {"items": [], "next": None}


def test_get_and_cancel_answer_404_outside_the_claimed_accounts(gw_live):
    alice, bob = gw_live.users["alice"], gw_live.users["bob"]
    mine, theirs = gw_live.accounts["alice"], gw_live.accounts["bob"]
    job = gw_live.submit(alice, mine)[1]["id"]
    other = gw_live.submit(bob, theirs)[1]["id"]
    holder = partial(token, sub=alice, accounts=[mine])

    status, got = gw_live.call("GET", f"/v1/jobs/{job}", holder)
    assert status == 200 and got["id"] == job and got["user"] == alice
    for path in (f"/v1/jobs/{other}", "/v1/jobs/999999", "/v1/jobs/abc"):
        status, document = gw_live.call("GET", path, holder)
        assert status == 404 and document["error"]["code"] == "not_found", (path, document)
    status, document = gw_live.call("DELETE", f"/v1/jobs/{other}", holder)
    assert status == 404
    assert gw_live.squeue(other)[2] in ("PENDING", "RUNNING")

    # a running job: the answer is the job once Slurm shows it cancelled
    gw_live.wait_for(job, "RUNNING")
    status, cancelled = gw_live.call("DELETE", f"/v1/jobs/{job}", holder)
    assert status == 202 and cancelled["state"] == "cancelled" and cancelled["runtime_state"] == "CANCELLED"
    assert gw_live.squeue(job)[2] == "CANCELLED" and gw_live.squeue(other)[2] in ("PENDING", "RUNNING")
    status, again = gw_live.call("DELETE", f"/v1/jobs/{job}", holder)
    assert status == 202 and again["state"] == "cancelled"
    status, ended = gw_live.call("GET", "/v1/jobs?state=cancelled", holder)
    assert status == 200 and job in [j["id"] for j in ended["items"]]


def test_accounting_records_parse_with_the_gateways_format(gw_live):
    """Ended jobs older than slurmctld's memory come from sacct: its real output, in the gateway's format."""
    alice, mine = gw_live.users["alice"], gw_live.accounts["alice"]
    job = gw_live.submit(alice, mine, script="#!/bin/bash\nexit 3\n")[1]["id"]
    gw_live.wait_for(job, "FAILED")
    deadline = time.monotonic() + 60
    while True:  # slurmdbd records the end a moment later
        out = gw_live.live.run("sacct", "-X", "-P", "-n", "-a", "--format=" + gw.SACCT_FORMAT, "-S", "now-7days",
                               "-E", "now", f"--accounts={mine}").stdout
        record = next((j for j in gw.parse_sacct(out) if j["id"] == job), None)
        if record and record["state"] == "failed":
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.5)
    assert record["user"] == alice and record["account"] == mine and record["exit_code"] == 3
    assert record["started_at"] and record["ended_at"] and record["submitted_at"].endswith("Z")
    status, listed = gw_live.call("GET", "/v1/jobs?state=failed", token(accounts=[mine]))
    assert status == 200
    assert next(j for j in listed["items"] if j["id"] == job)["exit_code"] == 3


def test_nodes_drain_resume_with_the_prefix_rule_and_features(gw_live):
    live, node = gw_live.live, gw_live.live.node
    status, nodes = gw_live.call("GET", "/v1/nodes", token())
    assert status == 200
    (gpu01,) = [n for n in nodes["items"] if n["name"] == node]
    assert gpu01["state"] == "idle" and gpu01["runtime_state"] == "IDLE" and gpu01["reason"] is None
    assert gpu01["cpus"] == 2 and gpu01["memory_mb"] == 1000 and gpu01["gpus"] == 2
    assert gpu01["features"] == ["a100", "test"] and gpu01["partitions"] == ["gpu", "debug"]

    operator = partial(token, node_operate=True)
    path = f"/v1/nodes/{node}"
    status, refused = gw_live.call("POST", path, token(), {"action": "drain", "reason": "x"})
    assert status == 403
    for name in ("gpu99", "gpu[01-02]", "..%2F"):
        status, refused = gw_live.call("POST", f"/v1/nodes/{name}", operator, {"action": "resume"})
        assert status == 404, (name, refused)

    status, drained = gw_live.call("POST", path, operator, {"action": "drain", "reason": "disk check"})
    assert status == 200 and drained["state"] == "drained" and drained["reason"] == "gpuaas-tenant: disk check"
    assert "Reason=gpuaas-tenant: disk check" in live.run("scontrol", "show", "-o", "node", node).stdout
    status, again = gw_live.call("POST", path, operator, {"action": "drain", "reason": "swap a DIMM"})
    assert status == 200 and again["reason"] == "gpuaas-tenant: swap a DIMM"  # the tenants' own drain: theirs
    status, resumed = gw_live.call("POST", path, operator, {"action": "resume"})
    assert status == 200 and resumed["state"] == "idle" and resumed["reason"] is None
    # a node in service without a reason: resume leaves it as it is
    status, unchanged = gw_live.call("POST", path, operator, {"action": "resume"})
    assert status == 200 and unchanged["state"] == "idle" and unchanged["reason"] is None

    def held(state, reason, owner):
        """The node drained or down under someone else's reason: resume and drain answer 409 naming its owner,
        and the reason stays."""
        live.run("scontrol", "update", f"nodename={node}", f"state={state}", f"reason={reason}")
        for body in ({"action": "resume"}, {"action": "drain", "reason": "ours"}):
            status, refused = gw_live.call("POST", path, operator, body)
            assert status == 409 and refused["error"]["code"] == "conflict", (state, reason, body, refused)
            assert refused["error"]["message"].startswith(f"{node} is {'down' if state == 'fail' else 'drained'} ")
            assert owner in refused["error"]["message"] and reason in refused["error"]["message"], refused
            shown = live.run("scontrol", "show", "-o", "node", node).stdout
            assert f"Reason={reason} [" in shown and re.search(f"State=\\S*{state.upper()}", shown), shown
        live.run("scontrol", "update", f"nodename={node}", "state=resume")
        deadline = time.monotonic() + 30  # not responding until slurmd answers slurmctld's next ping
        while gw_live.node_state(node) != "idle":
            assert time.monotonic() < deadline, live.run("scontrol", "show", "-o", "node", node).stdout
            time.sleep(0.2)

    # the platform's own lifecycle drains (slurm_node's reasons), an admin's drain, a failing node (the protocol's
    # down: a plain DOWN does not stay here, ReturnToService=2 puts it back as soon as slurmd answers)
    held("drain", "gpuaas: drained by gpuaas.apps", "the platform's own lifecycle (gpuaas)")
    held("drain", "gpuaas: removed by gpuaas.apps", "the platform's own lifecycle (gpuaas)")
    held("drain", "admin: firmware", "admin, set by root")
    held("fail", "admin: ECC errors", "admin, set by root")

    try:
        status, changed = gw_live.call("POST", path, operator, {"action": "features", "features": ["a100", "nvlink"]})
        assert status == 200 and changed["features"] == ["a100", "nvlink"]
        shown = live.run("scontrol", "show", "-o", "node", node).stdout
        assert "AvailableFeatures=a100,nvlink " in shown and "ActiveFeatures=a100,nvlink " in shown
        status, refused = gw_live.call("POST", path, operator, {"action": "features", "features": ["a,b"]})
        assert status == 400
    finally:
        live.run("scontrol", "update", f"nodename={node}", "AvailableFeatures=a100,test", "ActiveFeatures=a100,test")


def test_accounting_answers_slurmdbds_accounts_and_associations(gw_live):
    live, reader = gw_live.live, partial(token, accounting=True)
    for refused in (token(), token(accounts=[gw_live.accounts["alice"]], node_operate=True)):
        status, document = gw_live.call("GET", "/v1/accounting", refused)
        assert status == 403 and document["error"]["code"] == "forbidden", document
    status, accounting = gw_live.call("GET", "/v1/accounting", reader)
    assert status == 200, accounting
    shown = live.run("sacctmgr", "-n", "-P", "show", "account", "format=Account,Description").stdout.splitlines()
    expected = sorted(tuple(line.split("|", 1)) for line in shown if not line.startswith("root|"))
    assert [(a["name"], a["description"]) for a in accounting["accounts"]] == expected
    for who, account in gw_live.accounts.items():
        assert {"name": account, "description": "gateway live test", "parent": "root"} in accounting["accounts"]
        assert {"account": account, "user": gw_live.users[who]} in accounting["associations"]
    rows = live.run("sacctmgr", "-n", "-P", "show", "assoc", "format=Account,User").stdout.split()
    users = sorted({tuple(row.split("|")) for row in rows if not row.endswith("|") and not row.startswith("root|")})
    assert [(a["account"], a["user"]) for a in accounting["associations"]] == users


def epoch(text):
    """sacct's time (the host's UTC) as unix seconds; None for none."""
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")) if text[:1].isdigit() else None


def test_usage_answers_every_job_that_ended_in_the_window_as_sacct_shows_it(gw_live):
    live = gw_live.live
    alice, bob = gw_live.users["alice"], gw_live.users["bob"]
    mine, theirs = gw_live.accounts["alice"], gw_live.accounts["bob"]
    started = int(time.time()) - 1
    jobs = [gw_live.submit(alice, mine, script="#!/bin/bash\nsleep 2\n", resources={"gpus": 1})[1]["id"],
            gw_live.submit(bob, theirs, script="#!/bin/bash\nsleep 1\n", resources={"tasks": 2})[1]["id"],
            gw_live.submit(alice, mine, script="#!/bin/bash\nexit 3\n")[1]["id"]]
    # held, then cancelled: it never became eligible, never started, and still counts (for nothing)
    held = live.run("runuser", "-u", bob, "--", "sbatch", "--parsable", "-H", "-A", theirs, "-o", "/dev/null",
                    "--chdir", "/tmp", "--wrap", "sleep 1").stdout.strip()
    live.run("scancel", held)
    jobs.append(held)
    reader = partial(token, accounting=True)
    deadline = time.monotonic() + 90
    while True:  # slurmdbd records each end a moment after slurmctld
        end = int(time.time()) + 1
        status, usage = gw_live.call("GET", f"/v1/usage?start={started}&end={end}", reader)
        assert status == 200, usage
        items = {item["id"]: item for item in usage["items"]}
        if set(jobs) <= set(items):
            break
        assert time.monotonic() < deadline, (jobs, usage)
        time.sleep(1)
    assert (usage["start"], usage["end"]) == (started, end)
    assert all(started <= item["end_time"] < end for item in usage["items"])
    assert [item["id"] for item in usage["items"]] == [i["id"] for i in sorted(
        usage["items"], key=lambda item: (item["end_time"], int(item["id"])))]

    # field by field, as sacct prints them on the host (its own time format, in the host's UTC)
    fields = "JobIDRaw,State,User,Account,Submit,Start,End,ElapsedRaw,AllocCPUS,AllocTRES,NNodes"
    shown = live.run("env", "TZ=UTC", "sacct", "-X", "-a", "-P", "-n", "--noconvert", "-j", ",".join(jobs),
                     "--format=" + fields).stdout
    for line in shown.splitlines():
        job, state, user, account, submit, start, ended, elapsed, cpus, tres, nodes = line.split("|")
        gpus = re.search(r"gres/gpu=(\d+)", tres)
        memory = re.search(r"(?:^|,)mem=(\d+)M", tres)
        assert items[job] == {"id": job, "account": account, "user": user, "state": state.split()[0],
                              "submit_time": epoch(submit), "start_time": epoch(start), "end_time": epoch(ended),
                              "elapsed_seconds": int(elapsed), "cpus": int(cpus),
                              "gpus": int(gpus.group(1)) if gpus else 0,
                              "memory_mb": int(memory.group(1)) if memory else 0, "nodes": int(nodes)}, line
    first, second, failed, never = (items[job] for job in jobs)
    assert (first["user"], first["account"], first["state"], first["gpus"]) == (alice, mine, "COMPLETED", 1)
    assert first["elapsed_seconds"] >= 2 and first["end_time"] - first["start_time"] == first["elapsed_seconds"]
    assert (second["user"], second["account"], second["cpus"]) == (bob, theirs, 2)
    assert failed["state"] == "FAILED"
    # accounting records no start, or the cancel's moment, depending on when slurmctld learnt of it
    assert never["state"] == "CANCELLED" and never["elapsed_seconds"] == 0
    assert never["start_time"] in (None, never["end_time"])

    # a window that ends before they did holds none of them; no claim, a bad window: refused
    status, before = gw_live.call("GET", f"/v1/usage?start={started - 3600}&end={started}", reader)
    assert status == 200 and not set(jobs) & {item["id"] for item in before["items"]}
    status, refused = gw_live.call("GET", f"/v1/usage?start={started}&end={end}", token(accounts=[mine]))
    assert status == 403 and refused["error"]["code"] == "forbidden"
    status, refused = gw_live.call("GET", f"/v1/usage?start={started}&end={started + 32 * 86400}", reader)
    assert status == 400 and refused["error"]["code"] == "bad_request"


def test_teardown_stops_the_gateway_and_removes_its_files(gateway):
    live = gateway.live
    recap, tasks = play(live, gateway.tmp_path, "teardown", gateway.variables)
    assert recap["failures"] == 0 and recap["changed"] == 1, tasks
    assert live.run("systemctl", "is-active", "gpuaas-scheduler-gateway", check=False).stdout.strip() != "active"
    assert live.run("ls", "/etc/gpuaas", check=False).stdout.split() == []
    with pytest.raises(OSError):
        gateway.call("GET", "/v1/health", token())
    recap, tasks = play(live, gateway.tmp_path, "teardown", gateway.variables)
    assert recap["failures"] == 0 and recap["changed"] == 0, tasks

"""End to end: the control service, a worker process and real test hosts. A project service account
deploys and operates a Slurm cluster through the HTTP API only; after each step the test reads the
real Slurm state on the hosts and the instance's timeline.

This is the `gpuaas demo` flow, step by step, with the checks the demo only prints; an AWX job on the
deployed cluster, run as AWX runs one but without AWX; then an upgrade through two registered builds of this
collection that pin their own package versions, and a rollback.
"""

import io
import json
import os
import subprocess
import tarfile
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import ansible_runner
import pytest
import yaml
from awx.project import BIN, ROOT, project_update
from gpuaas_api import testhosts
from gpuaas_api.catalog.register import register
from gpuaas_api.demo import Demo

from .pinned_builds import PINNED_PACKAGES, REPO_LINE, local_repo, variant

pytestmark = [pytest.mark.hosts, pytest.mark.slow]


@pytest.fixture(scope="module")
def demo():
    lines = []
    # Health checks every 10 s (20 s by default), so that the day-2 tests wait less.
    d = Demo(prefix=f"e2e{uuid.uuid4().hex[:6]}", say=lines.append,
             worker_env={"GPUAAS_HEALTH_INTERVAL_SECONDS": "10"})
    d.lines = lines
    try:
        d.start_service()
        d.setup_tenancy()
        d.register_hosts({"pool-a": ["ctl", "w1", "w2"], "pool-b": ["w3", "w4"]})
        d.register_slurm_app()
        yield d
    finally:
        d.close()


def node_states(demo) -> dict[str, str]:
    out = demo.slurm("sinfo --noheader --Node --format='%N %t'")
    return dict(line.split() for line in out.splitlines())


def statuses(demo) -> dict[str, str]:
    return {m["host_name"]: m["status"] for m in demo.members() if m["status"] != "removed"}


def settled_statuses(demo, expected: dict[str, str], timeout: float = 60) -> dict[str, str]:
    """The members' statuses once they are `expected`. After a membership change slurmctld restarts, and a node
    may answer as not responding until its slurmd registers again: a health check may read it failed meanwhile,
    and the next one that reads it well brings it back (health/verdict.py). A test that starts from a settled
    cluster waits for that instead of reading one instant."""
    deadline = time.monotonic() + timeout
    while (now := statuses(demo)) != expected and time.monotonic() < deadline:
        time.sleep(1)
    return now


def slurmd_pid(demo, host: str) -> str:
    return demo.host_sh(host, "systemctl show -p MainPID --value slurmd")


def test_deploy_runs_jobs_and_reports_running(demo):
    demo.create_instance("pool-a", workers=2)
    op = demo.operate("/deploy")
    assert op["status"] == "succeeded", op
    assert demo.sa.get(f"/v1/instances/{demo.ids['instance']}")["status"] == "running"
    assert statuses(demo) == {"ctl": "active", "w1": "active", "w2": "active"}
    assert node_states(demo) == {"w1": "idle", "w2": "idle"}
    assert sorted(demo.slurm("srun --immediate=30 -N2 hostname").split()) == ["w1", "w2"]

    types = [e["type"] for e in demo.events(correlation_id=op["correlation_id"])]
    for expected in ("apps.instance.starting", "member_added", "start_completed", "apps.instance.running"):
        assert expected in types, f"{expected} missing from {types}"
    # healthy is read by the health check (due at once after a deploy), never claimed by the deploy
    healthy = wait_event(demo, "healthy")
    assert healthy["payload"]["module"] == "gpuaas.apps.slurm_info" and healthy["payload"]["hosts"] == 3
    assert types.index("start_completed") > types.index("run.playbook_stats")
    sample = demo.events(type="apps.instance.running")[0]
    for key in ("correlation_id", "tenant_id", "project_id", "app_slug", "operating_mode", "control_plane_scope",
                "runtime_backend"):
        assert sample[key], key


# -- An AWX job, without AWX ----------------------------------------------------------------------------
# What AWX does for a job template of this project (docs/awx.md): the project update installs the collection from
# collections/requirements.yml; the inventory source is the collection's inventory plugin reading the control
# service, with the token injected into the environment by a credential; the job runs the project's playbook
# through ansible_runner.run, with the machine credential's key loaded into an ssh-agent (ansible-runner's
# ssh_key), the survey's answers as extra variables and ANSIBLE_HOST_KEY_CHECKING=False (AWX's default). Like
# AWX, each job gets a private data directory that is removed afterwards: ansible-runner records the job's
# environment, and with it the token, in artifacts/<ident>/command.
AWX_WORKER = "w2"
REFUSAL = "The gpuaas.apps Slurm playbooks do not take --limit"  # tests/collection/test_limit.py
HOW_TO_TARGET = "-e slurm_members=<host>[,<host>...]"


@pytest.fixture(scope="module")
def awx_project(demo, tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("awx")
    project_update(base / "collections")
    source = base / "gpuaas.yml"  # no token in it: the plugin reads GPUAAS_TOKEN
    source.write_text(yaml.safe_dump({"plugin": "gpuaas.apps.gpuaas", "url": demo.admin.base_url,
                                      "project_id": demo.ids["project"], "instances": ["hpc"]}))
    return {"collections": base / "collections", "inventory": source}


def survey_answers(playbook: str, **answers) -> dict:
    """The extra variables of a job launched with the survey of awx/surveys/<playbook>.json: every question's
    default, then the answers given."""
    spec = json.loads((ROOT / "awx" / "surveys" / f"{playbook}.json").read_text())["spec"]
    return {q["variable"]: q["default"] for q in spec if "default" in q} | answers


def awx_job(demo, project: dict, playbook: str, extravars: dict, limit: str = "", verbosity: int = 0) -> dict:
    """Runs playbooks/<playbook>.yml as an AWX job; returns its status, events and stdout."""
    env = {"GPUAAS_TOKEN": demo.sa.token, "ANSIBLE_COLLECTIONS_PATH": str(project["collections"]),
           "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
           "ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:{os.environ['PATH']}"}
    with tempfile.TemporaryDirectory(prefix="gpuaas-awx-job-") as private:
        run = ansible_runner.run(private_data_dir=private, project_dir=str(ROOT), playbook=f"playbooks/{playbook}.yml",
                                 inventory=str(project["inventory"]), ssh_key=testhosts.SSH_KEY.read_text(),
                                 extravars=extravars, envvars=env, limit=limit or None, verbosity=verbosity,
                                 quiet=True)
        return {"status": run.status, "rc": run.rc, "events": list(run.events), "stdout": run.stdout.read()}


def task_output(stdout: str, task: str) -> str:
    """The -vvv output of one task: from its TASK line to the next TASK or PLAY line."""
    _, found, rest = stdout.partition(f"TASK [{task}]")
    assert found, f"task {task!r} did not run"
    return rest.split("\nTASK [")[0].split("\nPLAY ")[0]


def test_an_awx_job_drains_and_resumes_a_worker(demo, awx_project):
    assert node_states(demo) == {"w1": "idle", "w2": "idle"}
    job = awx_job(demo, awx_project, "slurm_member_drain",
                  survey_answers("slurm_member_drain", slurm_members=AWX_WORKER), verbosity=3)
    assert job["status"] == "successful" and job["rc"] == 0, job["stdout"][-4000:]
    assert node_states(demo) == {"w1": "idle", AWX_WORKER: "drain"}
    # The drain is a play of playbooks/.internal/: its group_vars link gives it pipelining (no module file
    # is copied to the controller first).
    drain = task_output(job["stdout"], "Stop new jobs from landing on the workers")
    address = demo.hosts["ctl"]["address"]
    assert f"<{address}> ESTABLISH SSH CONNECTION" in drain and f"<{address}> PUT " not in drain, drain[-3000:]

    job = awx_job(demo, awx_project, "slurm_member_resume",
                  survey_answers("slurm_member_resume", slurm_members=AWX_WORKER))
    assert job["status"] == "successful" and job["rc"] == 0, job["stdout"][-4000:]
    assert node_states(demo) == {"w1": "idle", "w2": "idle"}
    assert statuses(demo) == {"ctl": "active", "w1": "active", "w2": "active"}


def test_an_awx_job_with_a_limit_is_refused_before_any_host_is_contacted(demo, awx_project):
    job = awx_job(demo, awx_project, "slurm_member_drain",
                  survey_answers("slurm_member_drain", slurm_members=AWX_WORKER), limit=AWX_WORKER)
    assert job["status"] == "failed" and job["rc"] != 0
    ran = [(e["event"], e["event_data"].get("task")) for e in job["events"] if e["event"].startswith("runner_on_")]
    assert ran == [("runner_on_start", "Refuse --limit"), ("runner_on_failed", "Refuse --limit")], ran
    failed = next(e for e in job["events"] if e["event"] == "runner_on_failed")["event_data"]["res"]["msg"]
    assert REFUSAL in failed and f"(here '{AWX_WORKER}')" in failed and HOW_TO_TARGET in failed, failed
    assert node_states(demo) == {"w1": "idle", "w2": "idle"}


def test_member_add_joins_a_worker_without_restarting_the_others(demo):
    before = {h: slurmd_pid(demo, h) for h in ("w1", "w2")}
    op = demo.operate("/members", {"role": "worker", "allocation_id": demo.ids["pool-b"], "host_name": "w3"})
    assert op["status"] == "succeeded", op
    assert statuses(demo)["w3"] == "active"
    assert node_states(demo) == {"w1": "idle", "w2": "idle", "w3": "idle"}
    assert {h: slurmd_pid(demo, h) for h in ("w1", "w2")} == before


def test_drain_waits_for_the_job_then_refresh_reads_slurm(demo):
    job = demo.slurm("sbatch --parsable -w w1 --output=/dev/null --wrap 'sleep 8'")
    # Running before the drain: a job still pending when w1 drains could never start there.
    wait_running(demo, job)
    op = demo.operate(f"/members/{demo.member('w1')['id']}/drain")
    assert op["status"] == "succeeded", op
    assert demo.slurm(f"squeue --noheader --jobs={job}") == ""
    assert node_states(demo)["w1"] == "drain"
    assert statuses(demo)["w1"] == "drained"

    # Someone drains w2 behind the platform's back; refresh makes the API tell the truth.
    demo.slurm("scontrol update nodename=w2 state=drain reason='site maintenance'")
    op = demo.operate("/refresh")
    assert op["status"] == "succeeded", op
    assert statuses(demo)["w2"] in {"drained", "draining"}
    demo.slurm("scontrol update nodename=w2 state=resume")
    # The truth to read is Slurm's once it says so: right after a resume it may still mark the node
    # not responding (idle*) until its next ping, which the platform rightly reads as failed.
    wait_node_state(demo, "w2", "idle")
    refreshed = demo.operate("/refresh")
    assert refreshed["status"] == "succeeded", refreshed
    assert statuses(demo)["w2"] == "active", (node_states(demo), refreshed["result"])


def test_remove_and_replace_keep_the_cluster_working(demo):
    op = demo.operate(f"/members/{demo.member('w1')['id']}/remove")
    assert op["status"] == "succeeded", op
    assert "w1" not in statuses(demo)
    assert set(node_states(demo)) == {"w2", "w3"}
    assert demo.host_sh("w1", "pgrep -x slurmd || true") == ""

    op = demo.operate(f"/members/{demo.member('w2')['id']}/replace",
                      {"allocation_id": demo.ids["pool-b"], "host_name": "w4"})
    assert op["status"] == "succeeded", op
    assert set(statuses(demo)) == {"ctl", "w3", "w4"}
    assert set(node_states(demo)) == {"w3", "w4"}
    assert sorted(demo.slurm("srun --immediate=30 -N2 hostname").split()) == ["w3", "w4"]


def wait_event(demo, event_type: str, timeout: float = 60, after: int = 0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in demo.events(type=event_type) if e["id"] > after]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no {event_type} event within {timeout} s"
        time.sleep(1)


def wait_status(demo, host: str, status: str, timeout: float = 90) -> float:
    """Seconds until the member on `host` has `status` (asserting it comes within `timeout`)."""
    started = time.monotonic()
    while (now := demo.member(host))["status"] != status:
        assert time.monotonic() - started < timeout, f"{host} is {now['status']}, not {status}, after {timeout} s"
        time.sleep(0.5)
    return time.monotonic() - started


def test_a_killed_worker_is_failed_within_60_s_and_replaced_with_capacity_restored(demo):
    """Issue 23: the health check notices a dead host on its own, and the platform decides to force the
    replace (never a tenant parameter): the controller forgets the dead node, the new member joins, a
    job runs on it, and the dead host is cleaned once it is back."""
    expected = {"ctl": "active", "w3": "active", "w4": "active"}
    assert settled_statuses(demo, expected) == expected
    wait_event(demo, "healthy")
    job = demo.slurm("sbatch --parsable -w w4 --output=/dev/null --wrap 'sleep 600'")
    wait_running(demo, job)
    subprocess.run(["podman", "kill", demo.hosts["w4"]["container"]], check=True, capture_output=True)
    detected = wait_status(demo, "w4", "failed", timeout=60)
    dead = demo.member("w4")
    assert dead["status_reason"].startswith("health check: host w4 unreachable"), dead["status_reason"]
    assert dead["runtime"]["reachable"] is False
    got = demo.sa.get(f"/v1/instances/{demo.ids['instance']}")
    assert got["status"] == "degraded" and "w4" in got["status_reason"]
    workers = next(r for r in got["topology"]["roles"] if r["name"] == "worker")
    assert workers["members_by_status"] == {"active": 1, "failed": 1}
    assert statuses(demo)["w3"] == "active" and statuses(demo)["ctl"] == "active"
    demo.say(f"w4 killed: failed after {detected:.1f} s")

    op = demo.operate(f"/members/{dead['id']}/replace", {"allocation_id": demo.ids["pool-a"], "host_name": "w1"})
    assert op["status"] == "succeeded", op
    assert set(statuses(demo)) == {"ctl", "w3", "w1"}
    assert set(node_states(demo)) == {"w3", "w1"}
    assert sorted(demo.slurm("srun --immediate=30 -N2 hostname").split()) == ["w1", "w3"]
    pending = demo.events(type="host_cleanup_pending")
    assert [e["payload"]["node_name"] for e in pending] == ["w4"]
    # the host waits for its cleanup: nothing new is placed on it meanwhile
    refused = demo.sa.http.post(f"/v1/instances/{demo.ids['instance']}/members",
                                json={"role": "worker", "allocation_id": demo.ids["pool-b"], "host_name": "w4"},
                                headers={"Authorization": f"Bearer {demo.sa.token}"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "host_in_use", refused.text
    recovered = wait_event(demo, "apps.instance.running", after=pending[0]["id"])
    assert recovered["payload"]["reason"].startswith("health check: ")

    # back: the cleanup playbook runs there and leaves nothing of the app
    demo.podman_host("start", "w4")
    cleaned = wait_event(demo, "host_cleaned", timeout=120)
    assert cleaned["payload"]["node_name"] == "w4"
    assert demo.host_sh("w4", "pgrep -x 'slurmd|munged' || true") == ""
    assert demo.host_sh("w4", "ls /etc/slurm/slurm.conf /etc/munge/munge.key 2>/dev/null || true") == ""


def test_a_dead_controller_fails_the_instance_within_60_s_and_its_return_brings_it_back(demo):
    before = demo.events()[-1]["id"]
    demo.host_sh("ctl", "systemctl kill -s KILL slurmctld")
    failed = wait_event(demo, "apps.instance.failed", timeout=60, after=before)
    assert failed["payload"]["reason"].startswith("health check: the control plane did not answer"), failed
    assert demo.member("ctl")["status"] == "failed"
    assert {demo.member(h)["status"] for h in ("w1", "w3")} == {"active"}  # nothing read them: left alone
    demo.host_sh("ctl", "systemctl start slurmctld")
    back = wait_event(demo, "apps.instance.running", timeout=60, after=failed["id"])
    assert back["payload"]["from"] == "failed"
    assert statuses(demo) == {"ctl": "active", "w1": "active", "w3": "active"}


def test_a_run_that_fails_on_one_host_fails_that_member_alone_and_a_check_brings_it_back(demo):
    """A reconfigure that fails on w1 alone (its slurmd defaults file cannot be written: a directory is in
    the way): w1's member is failed with the run's reason for it, the controller and w3 keep their state
    (the run went on there), the instance is degraded; the health check then reads w1's slurmd running
    and brings it back. (A host that does not answer at the start of a Slurm run stops the run before it
    changes anything: the playbooks reach every host first.)"""
    assert statuses(demo) == {"ctl": "active", "w1": "active", "w3": "active"}
    # The file is kept aside and put back: the upgrade test rebuilds w1's packages from their installed files.
    demo.host_sh("w1", "mv /etc/default/slurmd /etc/default/slurmd.kept && mkdir /etc/default/slurmd")
    try:
        op = demo.operate("/reconfigure", {"parameters": {"slurm_controller_return_to_service": 1}})
    finally:
        demo.host_sh("w1", "rmdir /etc/default/slurmd && mv /etc/default/slurmd.kept /etc/default/slurmd")
    assert op["status"] == "failed" and "on w1" in op["error"]["message"], op
    run = demo.events(correlation_id=op["correlation_id"])
    (failed,) = [e for e in run if e["type"] == "member_failed"]
    assert failed["payload"]["node_name"] == "w1", failed
    assert failed["payload"]["reason"].startswith("reconfigure (operation") and "on w1" in failed["payload"]["reason"]
    assert "apps.instance.degraded" in [e["type"] for e in run]
    assert slurm_config(demo)["ReturnToService"] == "1"  # the controller got the new configuration (default 2)
    wait_status(demo, "w1", "active", timeout=90)
    recovered = [e for e in demo.events(type="member_recovered") if e["id"] > failed["id"]]
    assert [e["payload"]["node_name"] for e in recovered] == ["w1"]
    assert statuses(demo) == {"ctl": "active", "w1": "active", "w3": "active"}
    deadline = time.monotonic() + 60
    while demo.sa.get(f"/v1/instances/{demo.ids['instance']}")["status"] != "running":
        assert time.monotonic() < deadline, "the instance did not come back to running within 60 s"
        time.sleep(1)


# v2's own copy renders another slurm.conf (not ClusterName: slurmctld refuses a renamed cluster).
V2_ROLE_DEFAULTS = {"slurm_controller": {"slurm_controller_extra_config": {"MessageTimeout": 25}}}


@pytest.fixture(scope="module")
def rollout() -> dict:
    """What the upgrade test leaves for the rollback test: the versions, the v1 slurm.conf digest, the job."""
    return {}


def package_versions(demo, host: str) -> dict[str, str]:
    out = demo.host_sh(host, "dpkg-query --show --showformat='${Package} ${Version}\\n' " + " ".join(PINNED_PACKAGES))
    return dict(line.split() for line in out.splitlines())


def slurm_config(demo) -> dict[str, str]:
    lines = demo.slurm("scontrol show config").splitlines()
    return dict((k.strip(), v.strip()) for k, _, v in (line.partition("=") for line in lines if " = " in line))


def job_state(demo, job: str) -> str:
    return demo.slurm(f"squeue --noheader --jobs={job} --format=%T")


def wait_node_state(demo, node: str, state: str) -> None:
    deadline = time.monotonic() + 60
    while node_states(demo)[node] != state:
        assert time.monotonic() < deadline, f"node {node} is {node_states(demo)[node]!r}, not {state!r} after 60 s"
        time.sleep(0.5)


def wait_running(demo, job: str) -> None:
    deadline = time.monotonic() + 60
    while job_state(demo, job) != "RUNNING":
        assert time.monotonic() < deadline, f"job {job} is {job_state(demo, job)!r}, not RUNNING after 60 s"
        time.sleep(0.5)


def timed(demo, path: str, body: dict | None = None) -> tuple[dict, float]:
    started = time.monotonic()
    op = demo.operate(path, body)
    return op, time.monotonic() - started


def test_upgrade_runs_each_versions_own_pinned_build(demo, rollout, tmp_path):
    # w4 died and was replaced by w1 (test_a_killed_worker_...)
    hosts = ["ctl", "w1", "w3"]
    assert set(statuses(demo)) == set(hosts)
    # Two builds of every Slurm and munge package, made on each host from what it has (no mirror has two).
    with ThreadPoolExecutor(len(hosts)) as pool:
        installed = dict(zip(hosts, pool.map(
            lambda h: local_repo(demo.hosts[h]["container"], ["gpuaas1", "gpuaas2"]), hosts), strict=True))
    assert installed["w3"] == installed["w1"] == installed["ctl"]
    installed = installed["ctl"]

    def pins(suffix):
        return {"slurm_package_version": f"{installed['slurmctld']}+{suffix}",
                "munge_package_version": f"{installed['munge']}+{suffix}", "gpuaas_apt_repositories": [REPO_LINE]}

    def expected(suffix):
        return {p: f"{installed[p]}+{suffix}" for p in PINNED_PACKAGES}

    # Only a run of v2's own build can set MessageTimeout=25: the checkout's roles leave it at 10 s.
    registered = {}
    for suffix, defaults in (("gpuaas1", None), ("gpuaas2", V2_ROLE_DEFAULTS)):
        source = variant(tmp_path / suffix, suffix, pins(suffix), defaults)
        (registered[suffix],) = register(demo.admin.http, source, activate=True, reason=f"e2e: pinned {suffix}",
                                         skip_gates=True)
    v1, v2 = registered["gpuaas1"], registered["gpuaas2"]
    assert v1.status == v2.status == "active"
    assert v1.digest != v2.digest
    shipped = demo.sa.get(f"/v1/instances/{demo.ids['instance']}")["app_version"]
    assert {v1.version, v2.version} == {f"{shipped}+gpuaas1", f"{shipped}+gpuaas2"}
    rollout.update(v1=v1, v2=v2, expected=expected)

    op, seconds = timed(demo, "/upgrade", {"app_version_id": v1.version_id})
    assert op["status"] == "succeeded", op
    print(f"\nupgrade to {v1.version}: {seconds:.0f} s")
    assert op["params"]["target_version_id"] == v1.version_id
    instance = demo.sa.get(f"/v1/instances/{demo.ids['instance']}")
    assert (instance["app_version_id"], instance["app_version"]) == (v1.version_id, v1.version)
    assert instance["artifact_reference"].endswith(f"@{v1.digest}")
    (upgraded,) = demo.events(correlation_id=op["correlation_id"], type="apps.instance.upgraded")
    assert upgraded["payload"] == {"from": shipped, "to": v1.version}
    for host in hosts:
        assert package_versions(demo, host) == expected("gpuaas1"), host
    rollout["v1_conf"] = demo.slurm("sha256sum /etc/slurm/slurm.conf").split()[0]
    assert slurm_config(demo)["MessageTimeout"] == "10 sec"

    # A job that runs through both version changes.
    job = demo.slurm("sbatch --parsable -w w3 --output=/dev/null --wrap 'sleep 900'")
    rollout["job"] = job
    wait_running(demo, job)

    op, seconds = timed(demo, "/upgrade", {"app_version_id": v2.version_id})
    assert op["status"] == "succeeded", op
    print(f"upgrade to {v2.version}: {seconds:.0f} s")
    assert op["params"]["target_version_id"] == v2.version_id
    assert demo.sa.get(f"/v1/instances/{demo.ids['instance']}")["app_version_id"] == v2.version_id
    (upgraded,) = demo.events(correlation_id=op["correlation_id"], type="apps.instance.upgraded")
    assert upgraded["payload"] == {"from": v1.version, "to": v2.version}
    for host in hosts:
        assert package_versions(demo, host) == expected("gpuaas2"), host
    assert slurm_config(demo)["MessageTimeout"] == "25 sec"
    assert demo.slurm("sha256sum /etc/slurm/slurm.conf").split()[0] != rollout["v1_conf"]
    assert job_state(demo, job) == "RUNNING"


def test_rollback_returns_to_the_previous_build_exactly(demo, rollout):
    assert "job" in rollout, "runs after test_upgrade_runs_each_versions_own_pinned_build"
    v1, v2, job = rollout["v1"], rollout["v2"], rollout["job"]
    # Back to v1's build: its own reconfigure, downgrading every package to its +gpuaas1 pin.
    op, seconds = timed(demo, "/rollback")
    assert op["status"] == "succeeded", op
    print(f"\nrollback to {v1.version}: {seconds:.0f} s")
    assert op["params"]["target_version_id"] == v1.version_id
    instance = demo.sa.get(f"/v1/instances/{demo.ids['instance']}")
    assert (instance["app_version_id"], instance["app_version"]) == (v1.version_id, v1.version)
    assert instance["artifact_reference"].endswith(f"@{v1.digest}")
    (rolled_back,) = demo.events(correlation_id=op["correlation_id"], type="apps.instance.rolled_back")
    assert rolled_back["payload"] == {"from": v2.version, "to": v1.version}

    for host in ("ctl", "w1", "w3"):
        assert package_versions(demo, host) == rollout["expected"]("gpuaas1"), host
    assert demo.slurm("sha256sum /etc/slurm/slurm.conf").split()[0] == rollout["v1_conf"]
    assert slurm_config(demo)["MessageTimeout"] == "10 sec"
    assert job_state(demo, job) == "RUNNING"
    assert sorted(demo.slurm("srun --immediate=30 -N2 hostname").split()) == ["w1", "w3"]
    demo.slurm(f"scancel {job}")
    deadline = time.monotonic() + 60
    while job_state(demo, job) != "":
        assert time.monotonic() < deadline, f"job {job} still {job_state(demo, job)!r} 60 s after scancel"
        time.sleep(1)


def test_no_secret_value_leaves_the_service(demo):
    munge_key = demo.host_sh("ctl", "cat /etc/munge/munge.key")
    assert len(munge_key) >= 32
    haystacks = {"events": str(demo.events()), "serve log": (demo.state_dir / "serve.log").read_text(),
                 "worker log": (demo.state_dir / "worker.log").read_text(),
                 # a tenant's audit rows are a break-glass read for the platform admin
                 "audit": str(demo.admin.get(f"/v1/audit?limit=200&tenant_id={demo.ids['tenant']}",
                                             headers={"X-Break-Glass-Reason": "e2e: no secret in audit"})),
                 "demo output": "\n".join(demo.lines)}
    ops = demo.sa.get(f"/v1/instances/{demo.ids['instance']}/operations?limit=100")["items"]
    for op in ops:
        response = demo.sa.http.get(f"/v1/operations/{op['id']}/artifacts",
                                    headers={"Authorization": f"Bearer {demo.sa.token}"})
        assert response.status_code == 200, response.text
        with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    haystacks[f"{op['kind']} artifact {member.name}"] = tar.extractfile(member).read().decode(
                        "utf-8", "replace")
    leaks = [where for where, text in haystacks.items() if munge_key in text]
    assert not leaks, f"the MUNGE key appears in: {leaks}"


def test_decommission_tears_everything_down(demo):
    op = demo.operate("/decommission")
    assert op["status"] == "succeeded", op
    assert demo.sa.get(f"/v1/instances/{demo.ids['instance']}")["status"] == "stopped"
    types = [e["type"] for e in demo.events(correlation_id=op["correlation_id"])]
    assert "apps.instance.deleting" in types and "apps.instance.deleted" in types, types
    for host in ("ctl", "w1", "w2", "w3", "w4"):
        assert demo.host_sh(host, "pgrep -x 'slurmctld|slurmd|munged' || true") == ""
        assert demo.host_sh(host, "ls /etc/slurm/slurm.conf /etc/munge/munge.key 2>/dev/null || true") == ""

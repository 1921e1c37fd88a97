"""slurm_node against real Slurm daemons on a test host (see conftest.live_slurm), run over SSH as Ansible runs it."""

import time

import pytest


@pytest.fixture
def node(live_slurm):
    """The node, idle and in service before and after each test."""
    live_slurm.run("scancel", "--full", "-w", live_slurm.node, check=False)
    yield live_slurm
    live_slurm.run("scancel", "--full", "-w", live_slurm.node, check=False)
    live_slurm.run("scontrol", "update", f"nodename={live_slurm.node}", "state=resume", check=False)
    deadline = time.monotonic() + 30
    while "State=IDLE " not in live_slurm.run("scontrol", "show", "-o", "node", live_slurm.node).stdout:
        assert time.monotonic() < deadline, "node did not return to IDLE after the test"
        time.sleep(0.3)


def args(live, **kw):
    return dict(name=live.node, slurm_conf=live.conf, poll_interval=0.3, **kw)


def submit(live, seconds):
    job = live.run("sbatch", "--parsable", "-n1", "-o", "/dev/null", "--wrap", f"sleep {seconds}").stdout.strip()
    deadline = time.monotonic() + 30
    while live.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, f"job {job} did not start"
        time.sleep(0.2)
    return job


def test_read(node):
    result = node.module("slurm_node", args(node))
    assert not result.get("failed"), result
    assert result["changed"] is False and result["state"] == "IDLE" and result["running_jobs"] == 0


def test_drain_waits_for_the_running_job_with_progress_lines_then_is_idempotent_and_resume_returns_it(node):
    # Long enough to still run when the module, started over SSH, reads the node, and for two progress steps.
    job = submit(node, 15)
    started = time.monotonic()
    result = node.module("slurm_node", args(node, state="drain", reason="live test", wait=True, timeout=60,
                                            progress_interval=2), diff=True)
    assert not result.get("failed"), result
    assert result["changed"] is True and result["drained"] is True and result["state"] == "IDLE+DRAIN"
    assert result["reason"] == "gpuaas: live test" and result["reason_owner"] == "gpuaas"
    assert time.monotonic() - started >= 2, f"returned before job {job} could have finished"
    assert result["diff"]["before"]["state"] == "MIXED"
    # A line before each step of the wait, naming the job still running.
    progress = [line for line in node.output.splitlines() if "still draining" in line]
    assert len(progress) >= 2, node.output
    assert all(line.startswith(f"[slurm] slurm_node {node.node}: still draining, 1 job(s) running (ids: {job}); "
                               "waited ") and line.endswith("s of 60s") for line in progress), progress

    again = node.module("slurm_node", args(node, state="drain", reason="live test", wait=True))
    assert again["changed"] is False and again["drained"] is True

    resumed = node.module("slurm_node", args(node, state="resume"))
    assert resumed["changed"] is True and resumed["state"] == "IDLE" and resumed["responding"] is True
    assert node.module("slurm_node", args(node, state="resume"))["changed"] is False


def test_wait_timeout_names_the_running_job(node):
    job = submit(node, 60)
    result = node.module("slurm_node", args(node, state="drain", reason="live test", wait=True, timeout=2))
    assert result.get("failed")
    assert "timed out after 2s" in result["msg"] and job in result["msg"]
    assert result["state"] == "MIXED+DRAIN"


def test_a_drain_set_by_someone_else_is_kept_unless_forced(node):
    node.run("scontrol", "update", f"nodename={node.node}", "state=drain", "reason=slinky: xid 79")
    drained = node.module("slurm_node", args(node, state="drain", reason="ours"))
    assert drained["changed"] is False and drained["reason"] == "slinky: xid 79"
    assert any("someone else" in w for w in drained.get("warnings", []))

    refused = node.module("slurm_node", args(node, state="resume"))
    assert refused.get("failed") and "someone else" in refused["msg"]
    assert "slinky: xid 79" in node.run("scontrol", "show", "-o", "node", node.node).stdout

    forced = node.module("slurm_node", args(node, state="resume", force=True))
    assert forced["changed"] is True and forced["state"] == "IDLE"


def test_check_mode_changes_nothing(node):
    result = node.module("slurm_node", args(node, state="down", reason="check"), check=True, diff=True)
    assert result["changed"] is True and result["diff"]["after"]["state"] == "DOWN"
    assert "State=IDLE " in node.run("scontrol", "show", "-o", "node", node.node).stdout


def test_missing_node(live_slurm):
    request = dict(name="nosuch", state="drain", reason="x", slurm_conf=live_slurm.conf)
    failed = live_slurm.module("slurm_node", request)
    assert failed.get("failed") and "does not exist" in failed["msg"]
    ok = live_slurm.module("slurm_node", dict(request, missing_ok=True))
    assert not ok.get("failed") and ok["exists"] is False and ok["changed"] is False


def test_info(live_slurm):
    result = live_slurm.module("slurm_info", dict(slurm_conf=live_slurm.conf))
    assert not result.get("failed"), result
    assert result["slurm_version"].startswith("22.05")
    assert live_slurm.node in [n["name"] for n in result["nodes"]]
    assert any(p["default"] for p in result["partitions"])

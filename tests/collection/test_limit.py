"""--limit can never skip a check: every Slurm lifecycle playbook refuses a limited run, naming how to target
workers instead, before any host is contacted. The CLI's --limit and ansible-runner's `limit` (what AWX passes
for a job template's Limit field) are both run for real.

The inventory's hosts point at a closed port on loopback: a run that tried to reach one would report it
UNREACHABLE, so its absence proves that no host was contacted.
"""

import os
import socket

import ansible_runner
import pytest

from .ansible_run import BIN, ansible_env, run_playbook

PLAYBOOKS = {
    "slurm_deploy": {},
    "slurm_reconfigure": {},
    "slurm_member_add": {"slurm_members": "w2"},
    "slurm_member_drain": {"slurm_members": "w1"},
    "slurm_member_resume": {"slurm_members": "w1"},
    "slurm_member_remove": {"slurm_members": "w2"},
    "slurm_member_replace": {"slurm_member_old": "w1", "slurm_member_new": "w2"},
    "slurm_decommission": {},
    "slurm_member_cleanup": {"slurm_members": "w2"},
}
REFUSAL = "The gpuaas.apps Slurm playbooks do not take --limit"
HOW_TO_TARGET = "-e slurm_members=<host>[,<host>...]"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    """Two controllers (the issue's case) and two workers, none of which answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    path = tmp_path_factory.mktemp("limit") / "hosts.ini"
    path.write_text("\n".join([
        "[slurm_controller]", "c1", "c2", "", "[slurm_workers]", "w1", "w2", "",
        "[all:vars]", "ansible_host=127.0.0.1", f"ansible_port={closed_port}", "ansible_user=nobody",
        "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'", ""]))
    return path


# One limit style per playbook, so that every playbook and every kind of limit is covered once: a worker, a
# controller, a group, a pattern, every host, a host and localhost.
LIMITS = ["c1", "w1", "slurm_workers", "w*", "all", "c2,localhost", "slurm_controller", "w2", "w2"]


@pytest.mark.parametrize(("playbook", "limit"), list(zip(PLAYBOOKS, LIMITS, strict=True)))
def test_cli_limit_is_refused_before_any_host_is_contacted(inventory, playbook, limit):
    rc, output = run_playbook(f"gpuaas.apps.{playbook}", inventory, PLAYBOOKS[playbook], args=["--limit", limit])
    assert rc != 0, f"{playbook} --limit {limit} went on:\n{output[-3000:]}"
    flat = " ".join(output.split())
    assert REFUSAL in flat and f"(here '{limit}')" in flat and HOW_TO_TARGET in flat, output[-3000:]
    assert "UNREACHABLE" not in output, f"{playbook} --limit {limit} contacted a host:\n{output[-3000:]}"
    assert "PLAY [Check the inventory" not in output, "a play after the refusal ran"


def runner_events(inventory, tmp_path, playbook, limit=None):
    kwargs = {"limit": limit} if limit else {}
    run = ansible_runner.run(private_data_dir=str(tmp_path), playbook=f"gpuaas.apps.{playbook}",
                             inventory=str(inventory), extravars=PLAYBOOKS[playbook], quiet=True,
                             envvars={**{k: v for k, v in ansible_env().items() if k.startswith("ANSIBLE_")},
                                      "PATH": f"{BIN}:{os.environ['PATH']}"}, **kwargs)
    return run, list(run.events)


@pytest.mark.parametrize(("playbook", "limit"), [("slurm_member_drain", "w1"), ("slurm_deploy", "c1")])
def test_runner_limit_as_awx_passes_it_is_refused(inventory, tmp_path, playbook, limit):
    run, events = runner_events(inventory, tmp_path, playbook, limit)
    assert run.status == "failed" and run.rc != 0
    ran = [(e["event"], e["event_data"].get("task")) for e in events if e["event"].startswith("runner_on_")]
    assert ran == [("runner_on_start", "Refuse --limit"), ("runner_on_failed", "Refuse --limit")], ran
    failed = next(e for e in events if e["event"] == "runner_on_failed")
    assert REFUSAL in failed["event_data"]["res"]["msg"] and HOW_TO_TARGET in failed["event_data"]["res"]["msg"]


def test_runner_without_a_limit_passes_the_guard_and_reaches_the_checks(inventory, tmp_path):
    run, events = runner_events(inventory, tmp_path, "slurm_member_drain")
    assert run.status == "failed"
    ok = [e["event_data"]["task"] for e in events if e["event"] == "runner_on_ok"]
    failed = [e["event_data"]["res"]["msg"] for e in events if e["event"] == "runner_on_failed"]
    assert "Refuse --limit" in ok
    # The inventory's two controllers are the next check's refusal: the guard did not stop a limit-free run.
    assert failed == ["The inventory must have exactly one host in group slurm_controller; it has 2: c1, c2."]
    assert not any(e["event"] == "runner_on_unreachable" for e in events)

"""slurm_accounts against real slurmdbd + slurmctld on a test host (see conftest.live_slurm), run over SSH; and the
gpuaas.apps.slurm_access role, which runs it with unix_identities, through ansible-playbook on the same host."""

import json
import os
import subprocess
import time
import uuid

import live_ansible
import pytest
import yaml
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import parse_parsable

USER, OTHER, THIRD = "live-ada", "live-bo", "live-cy"


@pytest.fixture
def live(live_slurm):
    """Fresh account names; the platform's accounts, users and jobs are gone afterwards."""
    suffix = uuid.uuid4().hex[:6]
    live_slurm.names = {"research": f"research-{suffix}", "other": f"other-{suffix}"}
    yield live_slurm
    live_slurm.run("scancel", "--full", "-u", USER, check=False)
    live_slurm.run("scancel", "--full", "-u", OTHER, check=False)
    live_slurm.run("scancel", "--full", "-u", THIRD, check=False)
    cleared = accounts(live_slurm, [], {})
    assert not cleared.get("failed"), cleared
    assert not live_slurm.module("unix_identities", dict(identities=[])).get("failed")


def accounts(live, items, users, check=False, diff=False):
    return live.module("slurm_accounts", dict(accounts=[{"name": n, "project_id": p} for n, p in items],
                                              users=users, slurm_conf=live.conf), check=check, diff=diff)


def unix_users(live, *names):
    items = [dict(name=name, uid=200201 + i, principal=f"user:{name}") for i, name in enumerate(names)]
    result = live.module("unix_identities", dict(identities=items))
    assert not result.get("failed"), result


def assocs(live):
    out = live.run("sacctmgr", "-P", "-n", "show", "assoc", "format=Account,User,ParentName").stdout
    return {(r["account"], r["user"]): r["parent"] for r in parse_parsable(out, ("account", "user", "parent"))}


def defaults(live):
    out = live.run("sacctmgr", "-P", "-n", "show", "user", "format=User,DefaultAccount").stdout
    return dict(line.split("|") for line in out.split())


def submit(live, user, account=None):
    args = ["runuser", "-u", user, "--", "sbatch", "--parsable", "-o", "/dev/null", "--chdir", "/tmp"]
    return live.run(*args, *(["-A", account] if account else []), "--wrap", "sleep 120", check=False)


def test_accounts_users_and_a_second_run_without_changes(live):
    research, other = live.names["research"], live.names["other"]
    unix_users(live, USER, OTHER)  # first, as the role does: slurmctld looks the users up as it learns of them
    result = accounts(live, [(research, "6c1f-01"), (other, "aa-02")], {USER: research, OTHER: other}, diff=True)
    assert not result.get("failed"), result
    assert result["changed"] is True and result["accounts_added"] == sorted([research, other])
    assert result["users_changed"] == [USER, OTHER]
    assert result["diff"]["after"]["users"][USER] == {"accounts": [research], "default": research}

    now = assocs(live)
    assert now[(research, "")] == "root" and now[(other, "")] == "root"
    assert (research, USER) in now and (other, OTHER) in now and (other, USER) not in now
    assert defaults(live)[USER] == research and defaults(live)[OTHER] == other
    described = live.run("sacctmgr", "-P", "-n", "show", "account", f"name={research}",
                         "format=Description").stdout.strip()
    assert described == "gpuaas project 6c1f-01"

    again = accounts(live, [(research, "6c1f-01"), (other, "aa-02")], {USER: research, OTHER: other})
    assert again["changed"] is False and again["commands"] == []
    for user, account in ((USER, research), (OTHER, other)):  # each submits to its default account, and only there
        assert submit(live, user).returncode == 0
        refused = submit(live, user, research if account == other else other)
        assert refused.returncode != 0 and "Invalid account" in refused.stderr


def test_a_moved_user_a_dropped_user_and_a_dropped_account_with_their_jobs(live):
    research, other = live.names["research"], live.names["other"]
    unix_users(live, USER, OTHER)
    assert accounts(live, [(research, "1"), (other, "2")], {USER: research, OTHER: research})["changed"]
    # a held job (it waits in the queue whatever the node does) and one that runs
    held = live.run("runuser", "-u", USER, "--", "sbatch", "--parsable", "-H", "-o", "/dev/null", "--chdir", "/tmp",
                    "--wrap", "sleep 120").stdout.strip()
    running = submit(live, OTHER)
    assert running.returncode == 0, running.stderr
    running = running.stdout.strip()

    # USER moves to other, OTHER is no longer named, research goes
    result = accounts(live, [(other, "2")], {USER: other}, diff=True)
    assert not result.get("failed"), result
    assert result["accounts_removed"] == [research] and result["users_removed"] == [OTHER]
    assert result["users_changed"] == [USER]
    assert sorted(result["cancelled_jobs"]) == sorted([held, running])
    assert f"scancel --account={research} --user={OTHER}" in result["commands"]
    assert result["diff"]["before"]["users"][USER]["accounts"] == [research]
    assert result["diff"]["after"] == {"accounts": {other: "2"},
                                       "users": {USER: {"accounts": [other], "default": other}}}

    now = assocs(live)
    assert (research, "") not in now and (other, USER) in now and defaults(live)[USER] == other
    assert OTHER not in defaults(live)  # without associations Slurm removes the user
    assert not live.run("squeue", "-h", "-j", f"{held},{running}", check=False).stdout.strip()
    rejected = submit(live, OTHER)
    assert rejected.returncode != 0 and "Invalid account" in rejected.stderr
    assert submit(live, USER).returncode == 0  # to its new default account


def test_several_accounts_per_user_and_drift_made_by_hand_is_repaired(live):
    research, other = live.names["research"], live.names["other"]
    items = [(research, "1"), (other, "2")]
    unix_users(live, USER, OTHER, THIRD)
    # USER: both accounts, other its default (a member of two projects); OTHER: research alone
    users = {USER: [other, research], OTHER: research}
    result = accounts(live, items, users, diff=True)
    assert not result.get("failed"), result
    assert f"sacctmgr -i add user {USER} account={other},{research} defaultaccount={other}" in result["commands"]
    assert result["diff"]["after"]["users"][USER] == {"accounts": sorted([research, other]), "default": other}
    now = assocs(live)
    assert (research, USER) in now and (other, USER) in now and (other, OTHER) not in now
    assert defaults(live)[USER] == other
    assert submit(live, USER).returncode == 0  # to other, its default
    assert submit(live, USER, research).returncode == 0
    assert "Invalid account" in submit(live, OTHER, other).stderr
    assert accounts(live, items, users)["changed"] is False
    live.run("scancel", "-u", USER)  # sacctmgr refuses to remove an association with active jobs

    # an association of the map removed by hand comes back
    by_hand(live, "remove", "user", "where", f"name={USER}", f"account={research}")
    assert (research, USER) not in assocs(live)
    repaired = accounts(live, items, users)
    assert repaired["changed"] and repaired["users_changed"] == [USER], repaired
    assert repaired["commands"] == [f"sacctmgr -i add user {USER} account={research}"]
    assert (research, USER) in assocs(live) and defaults(live)[USER] == other

    # associations added by hand go: OTHER with other (which the map does not give it), THIRD (which the map does
    # not name) with research
    by_hand(live, "add", "user", OTHER, f"account={other}")
    by_hand(live, "add", "user", THIRD, f"account={research}")
    repaired = accounts(live, items, users)
    assert repaired["users_changed"] == [OTHER] and repaired["users_removed"] == [THIRD], repaired
    now = assocs(live)
    assert (other, OTHER) not in now and (research, OTHER) in now and (research, THIRD) not in now
    assert THIRD not in defaults(live)

    # a platform account removed by hand (slurmdbd refuses to remove a user's default account: research is nobody's
    # once OTHER moves to other) is created again, with its users' associations
    users = {USER: [other, research], OTHER: [other, research]}
    assert not accounts(live, items, users).get("failed")
    by_hand(live, "remove", "account", "where", f"name={research}")
    assert not {key for key in assocs(live) if research in key}
    repaired = accounts(live, items, users)
    assert repaired["accounts_added"] == [research] and repaired["users_changed"] == [USER, OTHER], repaired
    now = assocs(live)
    assert now[(research, "")] == "root" and (research, USER) in now and (research, OTHER) in now
    assert defaults(live)[USER] == other and defaults(live)[OTHER] == other
    described = live.run("sacctmgr", "-P", "-n", "show", "account", f"name={research}",
                         "format=Description").stdout.strip()
    assert described == "gpuaas project 1"
    assert accounts(live, items, users)["changed"] is False


def by_hand(live, *args):
    """sacctmgr as an admin would run it, again while slurmdbd has not yet recorded the end of cancelled jobs."""
    deadline = time.monotonic() + 30
    while (done := live.run("sacctmgr", "-i", *args, check=False)).returncode != 0:
        assert "Job(s) active" in done.stdout + done.stderr and time.monotonic() < deadline, done
        time.sleep(0.5)


def test_accounts_of_someone_else_are_refused_and_left_alone(live):
    site = live.names["research"]
    live.run("sacctmgr", "-i", "add", "account", site, "description=the site's own")
    try:
        refused = accounts(live, [(site, "1")], {})
        assert refused.get("failed")
        assert f"account {site} exists and the platform did not create it (its description 'the site`s own'" \
            in refused["msg"]
        assert accounts(live, [], {})["changed"] is False  # not the platform's: an empty list keeps it
        assert (site, "") in assocs(live)
    finally:
        live.run("sacctmgr", "-i", "remove", "account", "where", f"name={site}", check=False)


def test_check_mode_changes_nothing(live):
    research = live.names["research"]
    checked = accounts(live, [(research, "1")], {USER: research}, check=True, diff=True)
    assert checked["changed"] is True
    assert checked["commands"][0] == f"sacctmgr -i add account {research} parent=root description=gpuaas project 1"
    assert (research, "") not in assocs(live)


# ---- the role ---------------------------------------------------------------------------------------------
def play(live, tmp_path, access):
    """Runs the slurm_access role on the test host as its controller and login host; the run's stats for it."""
    playbook = tmp_path / "access.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Apply the access map",
        "hosts": "slurm",
        "gather_facts": False,
        "environment": {"SLURM_CONF": live.conf},  # the test cluster's; a controller's is at Slurm's own path
        "roles": [{"role": "gpuaas.apps.slurm_access", "slurm_access_login": True,
                   "slurm_access_scheduler": True, "slurm_access_accounting": True}],
    }]))
    extra = tmp_path / "access.json"
    extra.write_text(json.dumps({"gpuaas_access": access}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=live_ansible.collections_path(), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_PIPELINING="1", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(live_ansible.ANSIBLE) + "-playbook", "-i", str(live.inventory), str(playbook),
                           "-e", f"@{extra}"], env=env, capture_output=True, text=True, timeout=600, check=False)
    output = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert proc.returncode == 0, json.dumps(output["plays"][0]["tasks"], indent=1)[-4000:]
    return output["stats"]["slurm"], [t["task"]["name"] for t in output["plays"][0]["tasks"]]


def test_the_role_applies_the_access_map_and_a_second_run_changes_nothing(live, tmp_path):
    research, other = live.names["research"], live.names["other"]
    access = {
        "accounts": [{"name": research, "project_id": "6c1f-aa"}, {"name": other, "project_id": "77bb-cc"}],
        "identities": [
            # a member of both projects, other first: its default
            {"name": USER, "uid": 200301, "account": other, "accounts": [other, research], "principal": "user:0a7e",
             "login": True, "ssh_keys": []},
            # as a map from before `accounts` gives it: its one account
            {"name": OTHER, "uid": 200302, "account": research, "principal": "service_account:77", "login": False,
             "ssh_keys": []},
        ],
    }
    stats, tasks = play(live, tmp_path, access)
    assert stats["changed"] == 2, (stats, tasks)
    assert [t.split(" : ")[1].split(" ")[0] for t in tasks] == ["Validating", "Keep", "Keep"]
    assert live.run("getent", "passwd", USER).stdout.startswith(f"{USER}:x:200301:200301:gpuaas user/0a7e:")
    assert live.run("test", "-f", f"/home/{USER}/.ssh/authorized_keys").returncode == 0  # login, no keys: empty
    assert defaults(live)[USER] == other and defaults(live)[OTHER] == research
    now = assocs(live)
    assert (other, USER) in now and (research, USER) in now and (research, OTHER) in now and (other, OTHER) not in now
    job = submit(live, OTHER)  # the mapped user submits to its default account
    assert job.returncode == 0, job.stderr

    stats, _tasks = play(live, tmp_path, access)
    assert stats["changed"] == 0, stats

    stats, _tasks = play(live, tmp_path, {"accounts": [], "identities": []})
    assert stats["changed"] == 2
    assert live.run("getent", "passwd", USER, check=False).returncode == 2
    assert (research, "") not in assocs(live) and (other, "") not in assocs(live)
    deadline = time.monotonic() + 30
    while live.run("squeue", "-h", "-j", job.stdout.strip(), check=False).stdout.strip():
        assert time.monotonic() < deadline, "the removed user's job still runs"
        time.sleep(0.3)

"""slurm_account against real slurmdbd + slurmctld on a test host (see conftest.live_slurm), run over SSH."""

import uuid

import pytest
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import parse_parsable


@pytest.fixture
def names(live_slurm):
    """Fresh account names; whatever a test created is removed afterwards."""
    suffix = uuid.uuid4().hex[:6]
    made = {"tenant": f"tenant-{suffix}", "project": f"proj-{suffix}"}
    yield made
    for account in (made["project"], made["tenant"]):
        live_slurm.run("sacctmgr", "-i", "remove", "account", "where", f"name={account}", check=False)


def account(live, **kw):
    return live.module("slurm_account", dict(slurm_conf=live.conf, **kw))


def assoc(live, name, user=""):
    out = live.run(
        "sacctmgr",
        "-P",
        "-n",
        "show",
        "assoc",
        "where",
        f"account={name}",
        "format=User,ParentName,MaxJobs,GrpTRES,QOS",
    ).stdout
    rows = parse_parsable(out, ("user", "parent", "max_jobs", "grp_tres", "qos"))
    return next((r for r in rows if r["user"] == user), None)


def test_accounts_users_and_a_second_run_without_changes(live_slurm, names):
    tenant, project = names["tenant"], names["project"]
    tasks = [
        dict(account=tenant, description="live tenant", organization="acme"),
        dict(
            account=project,
            parent=tenant,
            description="live project",
            grp_tres="gres/gpu=2,mem=2G",
            max_jobs=4,
            fairshare="10",
        ),
        dict(account=project, user="root", max_submit_jobs=8),
    ]
    for task in tasks:
        result = account(live_slurm, **task)
        assert not result.get("failed"), result
        assert result["changed"] is True, task
    for task in tasks:
        again = account(live_slurm, **task)
        assert again["changed"] is False and again["commands"] == [], again

    row = assoc(live_slurm, project)
    assert row["parent"] == tenant and row["max_jobs"] == "4"
    assert set(row["grp_tres"].split(",")) == {"gres/gpu=2", "mem=2G"}
    assert assoc(live_slurm, project, "root") is not None

    # with the association in place slurmctld accepts the account; an unknown one is rejected
    accepted = live_slurm.run("sbatch", "-A", project, "-o", "/dev/null", "--wrap", "true", check=False)
    assert accepted.returncode == 0, accepted.stderr
    rejected = live_slurm.run("sbatch", "-A", "nosuch", "-o", "/dev/null", "--wrap", "true", check=False)
    assert rejected.returncode != 0 and "Invalid account" in rejected.stderr


def test_changes_show_in_diff_and_check_mode_changes_nothing(live_slurm, names):
    tenant = names["tenant"]
    assert account(live_slurm, account=tenant, max_jobs=3)["changed"] is True
    checked = live_slurm.module("slurm_account", dict(account=tenant, max_jobs=5, slurm_conf=live_slurm.conf),
                                check=True, diff=True)
    assert checked["changed"] is True
    cluster = next(iter(checked["diff"]["before"]["associations"]))
    assert checked["diff"]["before"]["associations"][cluster]["max_jobs"] == "3"
    assert checked["diff"]["after"]["associations"][cluster]["max_jobs"] == "5"
    assert assoc(live_slurm, tenant)["max_jobs"] == "3"

    changed = account(live_slurm, account=tenant, max_jobs=-1, grp_tres="cpu=2")
    assert changed["changed"] is True
    row = assoc(live_slurm, tenant)
    assert row["max_jobs"] == "" and row["grp_tres"] == "cpu=2"


def test_uppercase_and_odd_names_are_rejected_before_anything_is_stored(live_slurm):
    result = account(live_slurm, account="ProjUpper")
    assert result.get("failed") and "'projupper'" in result["msg"]
    result = account(live_slurm, account="a,b")
    assert result.get("failed") and "','" in result["msg"]
    shown = live_slurm.run("sacctmgr", "-P", "-n", "show", "account", "format=Account").stdout.split()
    assert "projupper" not in shown and "a" not in shown and "b" not in shown


def test_absent_refuses_while_users_or_sub_accounts_remain(live_slurm, names):
    tenant, project = names["tenant"], names["project"]
    account(live_slurm, account=tenant)
    account(live_slurm, account=project, parent=tenant)
    account(live_slurm, account=project, user="root")

    refused = account(live_slurm, account=tenant, state="absent")
    assert refused.get("failed") and project in refused["msg"]
    assert assoc(live_slurm, tenant) is not None

    assert account(live_slurm, account=project, user="root", state="absent")["changed"] is True
    assert account(live_slurm, account=project, state="absent")["changed"] is True
    assert account(live_slurm, account=tenant, state="absent")["changed"] is True
    assert account(live_slurm, account=tenant, state="absent")["changed"] is False
    assert assoc(live_slurm, tenant) is None


def test_force_removes_an_account_with_its_sub_accounts(live_slurm, names):
    tenant, project = names["tenant"], names["project"]
    account(live_slurm, account=tenant)
    account(live_slurm, account=project, parent=tenant)
    forced = account(live_slurm, account=tenant, state="absent", force=True)
    assert forced["changed"] is True and not forced.get("failed")
    assert assoc(live_slurm, project) is None

"""slurm_accounts: input rules and what must change, computed from real sacctmgr output (fixtures/, captured by
capture_fixtures.py) with the platform's accounts added in sacctmgr's own format. test_slurm_accounts_live.py runs
the module against real slurmdbd."""

import pytest
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import parse_parsable
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm_accounting import (
    ACCOUNT_COLUMNS,
    ASSOC_COLUMNS,
    USER_COLUMNS,
    assoc_rows,
)
from ansible_collections.gpuaas.apps.plugins.modules import slurm_accounts as sas
from slurm_fixtures import ReplaySlurm, run_module, text

# The recorded tree (root, tenant1 > proj-a, users alice and bob), none of it the platform's, plus two platform
# accounts: research (alice-3f9a, bob-77c2) and old (carol-1, and alice-3f9a too).
PLATFORM_ACCOUNTS = "research|gpuaas project 6c1f|research\nold|gpuaas project 99aa|old\n"
PLATFORM_ASSOCS = (
    "gpuaas-test|research||root|1|||||\n"
    "gpuaas-test|research|alice-3f9a||1|||||\n"
    "gpuaas-test|research|bob-77c2||1|||||\n"
    "gpuaas-test|old||root|1|||||\n"
    "gpuaas-test|old|carol-1||1|||||\n"
    "gpuaas-test|old|alice-3f9a||1|||||\n"
)
PLATFORM_USERS = "alice-3f9a|research\nbob-77c2|research\ncarol-1|old\n"


def snapshot(accounts="", assocs="", users="", jobs=None):
    return sas.Snapshot(
        parse_parsable(text("accounts") + accounts, ACCOUNT_COLUMNS),
        parse_parsable("".join(line.rsplit("|", 1)[0] + "\n" for line in text("users").splitlines()) + users,
                       USER_COLUMNS),
        assoc_rows(parse_parsable(text("assoc_tree") + assocs, ASSOC_COLUMNS)),
        jobs,
    )


PLATFORM = snapshot(PLATFORM_ACCOUNTS, PLATFORM_ASSOCS, PLATFORM_USERS)


def params(accounts=(("research", "6c1f"),), users=None, **kw):
    base = dict(accounts=[{"name": n, "project_id": p} for n, p in accounts], users=users or {},
                description_prefix="gpuaas project ", parent="root", cluster=None, cancel_timeout=60,
                slurm_conf=None)
    base.update(kw)
    return base


# ---- input rules ----------------------------------------------------------------------------------------
def test_names_sacctmgr_would_change_and_unknown_accounts_are_refused():
    problems = sas.check_params(params(accounts=[("Research", "6C1F"), ("root", "x"), ("a", "")],
                                       users={"Alice": "research", "bob": "nosuch", "carol": 5, "dave": [],
                                              "erin": ["a", "a"], "fay": ["a", "nosuch2"], "gus": ["a", 7]}))
    joined = "; ".join(problems)
    for expected in ("accounts[0].name 'Research' has uppercase letters",
                     "accounts[0].project_id '6C1F' has uppercase letters",
                     "accounts must not name root",
                     "accounts[2].project_id must not be empty",
                     "user 'Alice' has uppercase letters",
                     "user bob: its account nosuch is not one of accounts",
                     "users.carol must be an account name or a non-empty list of account names, not 5",
                     "users.dave must be an account name or a non-empty list",
                     "users.erin names an account twice: a, a",
                     "user fay: its account nosuch2 is not one of accounts",
                     "users.gus must be an account name or a non-empty list of account names, not ['a', 7]"):
        assert expected in joined, joined
    assert sas.check_params(params(users={"alice-3f9a": "research"})) == []
    assert sas.check_params(params(accounts=[("research", "1"), ("old", "2")],
                                   users={"alice-3f9a": ["old", "research"], "bob": ["research"]})) == []


def test_an_account_given_twice_is_refused():
    assert "account research is given twice" in sas.check_params(params(accounts=[("research", "1"),
                                                                                  ("research", "2")]))


# ---- what changes -----------------------------------------------------------------------------------------
def test_an_empty_slurmdbd_gets_the_accounts_and_users_with_their_defaults():
    the_plan = sas.plan(params(accounts=[("research", "6c1f"), ("other", "aa")],
                               users={"alice-3f9a": "research", "bob": "other"}), snapshot())
    assert the_plan.changes == [
        ["-i", "add", "account", "other", "parent=root", "description=gpuaas project aa"],
        ["-i", "add", "account", "research", "parent=root", "description=gpuaas project 6c1f"],
        ["-i", "add", "user", "alice-3f9a", "account=research", "defaultaccount=research"],
        # bob is in slurmdbd already (recorded: tenant1 and proj-a): another association, then the default,
        # then his other associations go, the site's accounts' too (an identity has its accounts alone)
        ["-i", "add", "user", "bob", "account=other"],
        ["-i", "modify", "user", "where", "name=bob", "set", "defaultaccount=other"],
    ]
    assert the_plan.removals == [("proj-a", "bob"), ("tenant1", "bob")]
    assert the_plan.accounts_added == ["other", "research"] and the_plan.users_changed == ["alice-3f9a", "bob"]
    assert the_plan.users_removed == []


def test_equal_slurmdbd_needs_nothing():
    equal = snapshot("research|gpuaas project 6c1f|research\n",
                     "gpuaas-test|research||root|1|||||\ngpuaas-test|research|alice-3f9a||1|||||\n",
                     "alice-3f9a|research\n")
    assert sas.plan(params(users={"alice-3f9a": "research"}), equal).empty()
    # the site's accounts and users (tenant1, proj-a, alice, bob) are not the platform's: an empty list keeps them
    assert sas.plan(params(accounts=()), snapshot()).empty()


def test_stale_accounts_and_users_lose_their_associations():
    the_plan = sas.plan(params(users={"alice-3f9a": "research"}), PLATFORM)
    assert the_plan.changes == []
    # bob-77c2 is no longer named; old goes, alice-3f9a's and carol-1's associations with it first
    assert the_plan.removals == [("old", "alice-3f9a"), ("old", "carol-1"), ("old", None), ("research", "bob-77c2")]
    assert the_plan.users_removed == ["bob-77c2", "carol-1"]
    assert the_plan.users_changed == ["alice-3f9a"]  # she loses old
    assert sas.removal_args("old", None, None) == ["-i", "remove", "account", "where", "name=old"]
    assert sas.removal_args("research", "bob-77c2", "c1") == [
        "-i", "remove", "user", "where", "name=bob-77c2", "account=research", "cluster=c1"]


def test_a_user_moved_to_another_account_gets_it_as_default_before_the_old_one_goes():
    the_plan = sas.plan(params(accounts=[("research", "6c1f"), ("old", "99aa")],
                               users={"alice-3f9a": "old", "bob-77c2": "research", "carol-1": "old"}), PLATFORM)
    assert the_plan.changes == [["-i", "modify", "user", "where", "name=alice-3f9a", "set", "defaultaccount=old"]]
    assert the_plan.removals == [("research", "alice-3f9a")]


# ---- several accounts per user (a member of several projects, a service account with a cross-project grant) ----
BOTH = (("research", "6c1f"), ("old", "99aa"))


def test_a_user_gets_all_its_accounts_in_one_command_the_first_as_default():
    the_plan = sas.plan(params(accounts=BOTH, users={"dana-1": ["old", "research"]}), snapshot())
    assert the_plan.changes[-1] == ["-i", "add", "user", "dana-1", "account=old,research", "defaultaccount=old"]
    assert the_plan.removals == [] and the_plan.users_changed == ["dana-1"]
    # a user slurmdbd knows already (bob: tenant1 and proj-a, the site's) gets both, then its default, then loses
    # the site's
    the_plan = sas.plan(params(accounts=BOTH, users={"bob": ["research", "old"]}), snapshot())
    assert the_plan.changes[-2:] == [["-i", "add", "user", "bob", "account=research,old"],
                                     ["-i", "modify", "user", "where", "name=bob", "set", "defaultaccount=research"]]
    assert the_plan.removals == [("proj-a", "bob"), ("tenant1", "bob")]


def test_several_accounts_equal_to_slurmdbd_need_nothing_in_either_order_of_listing():
    users = {"alice-3f9a": ["research", "old"], "bob-77c2": "research", "carol-1": ["old"]}
    assert sas.plan(params(accounts=BOTH, users=users), PLATFORM).empty()
    # the same associations with the other default: only the default changes
    the_plan = sas.plan(params(accounts=BOTH, users={**users, "alice-3f9a": ["old", "research"]}), PLATFORM)
    assert the_plan.changes == [["-i", "modify", "user", "where", "name=alice-3f9a", "set", "defaultaccount=old"]]
    assert the_plan.removals == [] and the_plan.users_changed == ["alice-3f9a"]
    assert sas.predicted_view(params(accounts=BOTH, users=users))["users"]["alice-3f9a"] == {
        "accounts": ["old", "research"], "default": "research"}
    assert sas.view(PLATFORM, params(accounts=BOTH, users=users))["users"] == sas.predicted_view(
        params(accounts=BOTH, users=users))["users"]


def test_hand_made_drift_is_repaired():
    users = {"alice-3f9a": ["research", "old"], "bob-77c2": "research", "carol-1": ["old"]}
    # alice's association with old removed by hand: added again
    removed = snapshot(PLATFORM_ACCOUNTS, PLATFORM_ASSOCS.replace("gpuaas-test|old|alice-3f9a||1|||||\n", ""),
                       PLATFORM_USERS)
    the_plan = sas.plan(params(accounts=BOTH, users=users), removed)
    assert the_plan.changes == [["-i", "add", "user", "alice-3f9a", "account=old"]] and not the_plan.removals
    # bob associated with old by hand: removed; so is a user the list does not name at all
    added = snapshot(PLATFORM_ACCOUNTS, PLATFORM_ASSOCS + "gpuaas-test|old|bob-77c2||1|||||\n"
                     "gpuaas-test|research|eve-9||1|||||\n", PLATFORM_USERS + "eve-9|research\n")
    the_plan = sas.plan(params(accounts=BOTH, users=users), added)
    assert the_plan.changes == [] and the_plan.removals == [("old", "bob-77c2"), ("research", "eve-9")]
    assert the_plan.users_changed == ["bob-77c2"] and the_plan.users_removed == ["eve-9"]
    # old removed by hand (with its associations; carol, left without any, went with them): created again, with
    # alice's and carol's associations
    gone = snapshot("research|gpuaas project 6c1f|research\n",
                    "".join(line + "\n" for line in PLATFORM_ASSOCS.splitlines() if "|old|" not in line),
                    "alice-3f9a|research\nbob-77c2|research\n")
    the_plan = sas.plan(params(accounts=BOTH, users=users), gone)
    assert the_plan.changes == [["-i", "add", "account", "old", "parent=root", "description=gpuaas project 99aa"],
                                ["-i", "add", "user", "alice-3f9a", "account=old"],
                                ["-i", "add", "user", "carol-1", "account=old", "defaultaccount=old"]]
    assert the_plan.accounts_added == ["old"] and the_plan.users_changed == ["alice-3f9a", "carol-1"]


def test_description_and_parent_are_set_back():
    drifted = snapshot("research|gpuaas project 0000|research\n", "gpuaas-test|research||tenant1|1|||||\n")
    the_plan = sas.plan(params(cluster="gpuaas-test"), drifted)
    assert the_plan.changes == [
        ["-i", "modify", "account", "where", "name=research", "set", "description=gpuaas project 6c1f"],
        ["-i", "modify", "account", "where", "name=research", "cluster=gpuaas-test", "set", "parent=root"],
    ]


def test_accounts_of_someone_else_are_refused():
    with pytest.raises(sas.Refused, match="account tenant1 exists and the platform did not create it \\(its "
                                          "description 'tenant one' does not start with 'gpuaas project '\\)"):
        sas.plan(params(accounts=[("tenant1", "1")]), snapshot())
    # a platform account that someone hung their own account below
    below = snapshot("mine|gpuaas project 1|mine\n",
                     "gpuaas-test|mine||root|1|||||\ngpuaas-test|theirs||mine|1|||||\n")
    with pytest.raises(sas.Refused, match="account mine, which the list no longer names, has sub-accounts theirs"):
        sas.plan(params(accounts=()), below)


def test_jobs_of_removed_associations_are_cancelled_first():
    jobs = parse_parsable("17|bob-77c2|research\n18|alice-3f9a|research\n19|carol-1|old\n20|bob|proj-a\n",
                          sas.JOB_COLUMNS)
    with_jobs = snapshot(PLATFORM_ACCOUNTS, PLATFORM_ASSOCS, PLATFORM_USERS, jobs)
    the_plan = sas.plan(params(users={"alice-3f9a": "research"}), with_jobs)
    assert sas.planned_commands(the_plan, with_jobs, None) == [
        "sacctmgr -i remove user where name=alice-3f9a account=old",
        "scancel --account=old --user=carol-1",
        "sacctmgr -i remove user where name=carol-1 account=old",
        "sacctmgr -i remove account where name=old",  # its users' jobs went with them
        "scancel --account=research --user=bob-77c2",
        "sacctmgr -i remove user where name=bob-77c2 account=research",
    ]
    assert with_jobs.jobs_of("research", "bob-77c2") == ["17"] and with_jobs.jobs_of("old") == ["19"]


def test_views_for_diff():
    before = sas.view(PLATFORM, params(users={"alice-3f9a": "research"}))
    assert before == {
        "accounts": {"old": "99aa", "research": "6c1f"},
        "users": {"alice-3f9a": {"accounts": ["old", "research"], "default": "research"},
                  "bob-77c2": {"accounts": ["research"], "default": "research"},
                  "carol-1": {"accounts": ["old"], "default": "old"}},
    }
    assert sas.predicted_view(params(users={"alice-3f9a": "research"})) == {
        "accounts": {"research": "6c1f"},
        "users": {"alice-3f9a": {"accounts": ["research"], "default": "research"}},
    }


# ---- the removal's retry, and the module's flow against sacctmgr's answers ----------------------------------------
# sacctmgr 22.05's answer to a removal while a job of the association runs, as it printed it on the test host;
# test_slurm_accounts_live.py meets the real one.
ACTIVE = (1, "", " Error with request: Job(s) active, cancel job(s) before remove\n"
                 "  JobID = 21         C = gpuaas-test A = research   U = bob-77c2\n")


class Clock:
    def __init__(self):
        self.now = 0.0

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def recorder(answers):
    """A Recorder whose runner answers from ``answers`` (ReplaySlurm, the test double for Slurm's CLI)."""
    slurm = ReplaySlurm(answers)

    class Runner:
        def run(self, tool, args, check=True):
            rc, out, err = slurm([tool] + list(args))
            if check and rc:
                raise sas.SlurmError([tool] + list(args), rc, out, err)
            return rc, out, err

    return sas.Recorder(Runner()), slurm


def test_a_job_submitted_after_squeue_was_read_is_cancelled_and_the_removal_retried():
    rec, slurm = recorder({("sacctmgr", "remove"): [ACTIVE, ACTIVE, (0, " Deleting user...\n", "")],
                           ("scancel",): [(0, "", "")]})
    clock = Clock()
    sas.remove(rec, "research", "bob-77c2", None, False, 60, sleep=clock.sleep, clock=clock.time)
    assert rec.done == ["sacctmgr -i remove user where name=bob-77c2 account=research",
                        "scancel --account=research --user=bob-77c2",
                        "sacctmgr -i remove user where name=bob-77c2 account=research",
                        "sacctmgr -i remove user where name=bob-77c2 account=research"]


def test_jobs_that_stay_active_end_in_a_failure_naming_them():
    rec, _slurm = recorder({("sacctmgr", "remove"): [ACTIVE], ("scancel",): [(0, "", "")]})
    clock = Clock()
    with pytest.raises(sas.SlurmError, match="JobID = 21"):
        sas.remove(rec, "research", "bob-77c2", None, True, 5, sleep=clock.sleep, clock=clock.time)
    assert not any(line.startswith("scancel") for line in rec.done)  # cancelled before, by the caller
    other = (1, "", " Error with request: nothing to remove\n")
    rec, _slurm = recorder({("sacctmgr", "remove"): [other]})
    with pytest.raises(sas.SlurmError, match="nothing to remove"):
        sas.remove(rec, "research", None, None, False, 60, sleep=clock.sleep, clock=clock.time)
    assert len(rec.done) == 1


def reads(assocs=PLATFORM_ASSOCS, accounts=PLATFORM_ACCOUNTS, users=PLATFORM_USERS):
    return {
        ("sacctmgr", "show", "assoc"): [(0, text("assoc_tree") + assocs, "")],
        ("sacctmgr", "show", "account"): [(0, text("accounts") + accounts, "")],
        ("sacctmgr", "show", "user"): [(0, "root|root\n" + users, "")],
    }


def test_module_check_mode_reads_the_queue_and_changes_nothing():
    slurm = ReplaySlurm({("squeue",): [(0, "17|bob-77c2|research\n", "")], **reads()})
    args = dict(accounts=[{"name": "research", "project_id": "6c1f"}], users={"alice-3f9a": "research"})
    result = run_module(sas.main, args, slurm, check_mode=True).result
    assert result["changed"] is True and result["cancelled_jobs"] == ["17"]
    assert result["accounts_removed"] == ["old"] and result["users_removed"] == ["bob-77c2", "carol-1"]
    assert not slurm.called("-i") and not slurm.called("scancel")


def test_module_fails_when_slurmdbd_still_differs():
    slurm = ReplaySlurm({("sacctmgr", "-i", "add"): [(0, " Adding Account(s)\n", "")],
                         **reads(assocs="", accounts="", users="")})
    ended = run_module(sas.main, dict(accounts=[{"name": "research", "project_id": "6c1f"}]), slurm)
    assert ended.failed and "still differs" in ended.result["msg"] and "add account research" in ended.result["msg"]


def test_module_takes_lists_and_strings():
    slurm = ReplaySlurm(reads())
    args = dict(accounts=[{"name": "research", "project_id": "6c1f"}, {"name": "old", "project_id": "99aa"}],
                users={"alice-3f9a": ["research", "old"], "bob-77c2": "research", "carol-1": ["old"]})
    result = run_module(sas.main, args, slurm).result
    assert result["changed"] is False and result["commands"] == [], result
    refused = run_module(sas.main, dict(args, users={"alice-3f9a": {"research": 1}}), ReplaySlurm({}))
    assert refused.failed and "users.alice-3f9a must be an account name or a non-empty list" in refused.result["msg"]


def test_module_without_changes_reads_no_queue():
    slurm = ReplaySlurm(reads(assocs="gpuaas-test|research||root|1|||||\n",
                              accounts="research|gpuaas project 6c1f|research\n", users=""))
    result = run_module(sas.main, dict(accounts=[{"name": "research", "project_id": "6c1f"}]), slurm).result
    assert result["changed"] is False and result["commands"] == [] and not slurm.called("squeue")

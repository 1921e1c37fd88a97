"""slurm_account: input rules, and what must change, computed from real sacctmgr output."""

import pytest
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import parse_parsable
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm_accounting import (
    ACCOUNT_COLUMNS,
    ASSOC_COLUMNS,
    assoc_rows,
)
from ansible_collections.gpuaas.apps.plugins.modules import slurm_account as sa
from slurm_fixtures import INDEX, ReplaySlurm, run_module, text

ACCOUNTS = parse_parsable(text("accounts"), ACCOUNT_COLUMNS)
USERS = parse_parsable(text("users"), ("User", "DefaultAccount", "Cluster"))
TREE = assoc_rows(parse_parsable(text("assoc_tree"), ASSOC_COLUMNS))


def params(**kw):
    base = dict(
        account="proj-a",
        user=None,
        state="present",
        parent=None,
        description=None,
        organization=None,
        cluster=None,
        default_account=False,
        qos=None,
        default_qos=None,
        max_jobs=None,
        max_submit_jobs=None,
        grp_tres=None,
        fairshare=None,
        force=False,
        slurm_conf=None,
    )
    base.update(kw)
    return base


def snapshot(p, assocs=TREE):
    account_row = next((a for a in ACCOUNTS if a["Account"] == p["account"]), None)
    user_row = next((u for u in USERS if u["User"] == p["user"]), None)
    if p["cluster"]:
        assocs = [a for a in assocs if a["cluster"] == p["cluster"]]
    return sa.Snapshot(p["account"], p["user"], account_row, user_row, assocs)


def plan(**kw):
    p = params(**kw)
    return sa.plan(p, snapshot(p))


# ---- names sacctmgr would change -----------------------------------------------------------------------
def test_sacctmgr_really_lowercases_names_and_text():
    # the evidence for the rule below, recorded from sacctmgr 22.05
    assert INDEX["add_account_uppercase"]["command"].startswith("sacctmgr -i add account ProjUpper")
    recorded = text("add_account_uppercase")
    assert "projupper" in recorded and "mixed case" in recorded and "acme corp" in recorded


@pytest.mark.parametrize(
    "kind, value, expected",
    [
        ("account", "ProjA", "silently store it as 'proja'"),
        ("user", "Alice", "silently store it as 'alice'"),
        ("account", "a,b", "','"),
        ("account", "a=b", "'='"),
        ("account", "bad name", "' '"),
        ("account", "it's", '"\'"'),
        ("account", "-lead", "must start with"),
        ("account", "", "must not be empty"),
    ],
)
def test_names_sacctmgr_would_change_are_rejected(kind, value, expected):
    problems = sa.check_params(params(**{kind: value}))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("value", ["proj-a", "tenant_1", "x.y-z_1", "a1"])
def test_good_names_pass(value):
    assert sa.check_params(params(account=value, user=value)) == []


@pytest.mark.parametrize(
    "kind, value, expected",
    [
        ("description", "Project A", "silently store it as 'project a'"),
        ("organization", "it's", '"\'"'),
        ("description", "a|b", "'|'"),
        ("description", " padded", "leading or trailing"),
    ],
)
def test_text_sacctmgr_would_change_is_rejected(kind, value, expected):
    assert any(expected in p for p in sa.check_params(params(**{kind: value})))


def test_other_parameter_rules():
    problems = sa.check_params(
        params(user="alice", parent="root", fairshare="lots", max_jobs=-2, grp_tres="gpu", qos=["High"])
    )
    joined = "; ".join(problems)
    for expected in (
        "parent applies to the account",
        "fairshare must be",
        "max_jobs must be",
        "grp_tres:",
        "qos 'High'",
    ):
        assert expected in joined
    assert "default_account needs user" in sa.check_params(params(default_account=True))


def test_tres_parsing_normalises_memory():
    assert sa.parse_tres("gres/gpu=4,mem=2G") == {"gres/gpu": "4", "mem": "2048"}
    assert sa.parse_tres("mem=100M") == sa.parse_tres("mem=100")
    assert sa.parse_tres("") == {}
    with pytest.raises(ValueError):
        sa.parse_tres("cpu=4G")


# ---- what changes --------------------------------------------------------------------------------------
def test_matching_account_needs_nothing():
    assert (
        plan(
            parent="tenant1",
            fairshare="10",
            max_jobs=5,
            max_submit_jobs=20,
            grp_tres="gres/gpu=4,cpu=8",
            qos=["normal", "high"],
            default_qos="high",
            description="project a",
            organization="acme",
        )
        == []
    )


def test_changed_fields_only_are_set():
    commands = plan(parent="tenant1", max_jobs=6, grp_tres="gres/gpu=8", description="project a")
    assert commands == [
        ["-i", "modify", "account", "where", "name=proj-a", "set", "grptres=cpu=-1,gres/gpu=8", "maxjobs=6"]
    ]


def test_new_account_is_created_under_root_with_its_fields():
    assert plan(account="proj-b", max_jobs=3, description="b") == [
        ["-i", "add", "account", "proj-b", "maxjobs=3", "parent=root", "description=b"]
    ]


def test_text_fields_are_modified_without_cluster():
    assert plan(cluster="gpuaas-test", organization="other") == [
        ["-i", "modify", "account", "where", "name=proj-a", "set", "organization=other"]
    ]


def test_missing_parent_is_refused():
    with pytest.raises(sa.Refused, match="parent account nosuch does not exist"):
        plan(account="proj-b", parent="nosuch")


def test_limits_inherited_from_the_account_count_as_in_place_for_minus_one():
    # alice shows MaxJobs=5 copied down from proj-a; -1 (no own limit) is what she has
    assert plan(user="alice", max_jobs=-1) == []
    # bob has his own MaxJobs=2: clearing it is a change
    assert plan(user="bob", max_jobs=-1) == [
        ["-i", "modify", "user", "where", "name=bob", "account=proj-a", "set", "maxjobs=-1"]
    ]


def test_user_association_and_default_account():
    assert plan(user="carol", default_account=True, max_jobs=2) == [
        ["-i", "add", "user", "carol", "account=proj-a", "defaultaccount=proj-a", "maxjobs=2"]
    ]
    # bob's default is tenant1
    assert plan(user="bob", default_account=True) == [
        ["-i", "modify", "user", "where", "name=bob", "set", "defaultaccount=proj-a"]
    ]
    assert plan(account="tenant1", user="bob", default_account=True) == []


def test_user_of_a_missing_account_is_refused():
    with pytest.raises(sa.Refused, match="account nosuch does not exist on cluster c1"):
        plan(account="nosuch", user="alice", cluster="c1")


def test_absent_account_with_users_or_sub_accounts_is_refused_unless_forced():
    with pytest.raises(sa.Refused, match="users alice, bob"):
        plan(state="absent")
    with pytest.raises(sa.Refused, match="users bob and sub-accounts proj-a"):
        plan(account="tenant1", state="absent")
    assert plan(account="tenant1", state="absent", force=True) == [["-i", "remove", "account", "where", "name=tenant1"]]


def test_absent_is_idempotent():
    assert plan(account="gone", state="absent") == []
    assert plan(user="carol", state="absent") == []
    assert plan(user="alice", state="absent", cluster="gpuaas-test") == [
        ["-i", "remove", "user", "where", "name=alice", "account=proj-a", "cluster=gpuaas-test"]
    ]


def test_cascade_that_the_refusal_prevents_is_real():
    # recorded: removing tenant1 took proj-a and its users with it
    before = {r["account"] for r in TREE}
    after = {r["account"] for r in assoc_rows(parse_parsable(text("assoc_after_cascade"), ASSOC_COLUMNS))}
    assert before - after == {"tenant1", "proj-a"}


def test_diff_views():
    p = params(max_jobs=6, qos=["normal"])
    before = sa.diff_view(p, snapshot(p))
    assert before == {
        "exists": True,
        "associations": {"gpuaas-test": {"max_jobs": "5", "qos": ["high", "normal"]}},
    }
    after = sa.predicted_view(p, before)
    assert after["associations"]["gpuaas-test"] == {"max_jobs": "6", "qos": ["normal"]}


# ---- the module's flow against recorded answers ------------------------------------------------------------
def recorded_reads(assoc_fixture="assoc_tree"):
    return {
        ("sacctmgr", "show", "assoc"): [(0, text(assoc_fixture), "")],
        ("sacctmgr", "show", "account"): [(0, "proj-a|project a|acme\n", "")],
        ("sacctmgr", "show", "user"): [(0, "bob|tenant1\n", "")],
    }


def test_module_second_run_is_unchanged_and_runs_no_change_command():
    slurm = ReplaySlurm(recorded_reads())
    result = run_module(
        sa.main, dict(account="proj-a", parent="tenant1", max_jobs=5, grp_tres="cpu=8,gres/gpu=4"), slurm
    ).result
    assert result["changed"] is False and result["commands"] == []
    assert all("-i" not in call for call in slurm.calls)


def test_module_fails_when_the_value_does_not_stick():
    slurm = ReplaySlurm({("sacctmgr", "-i", "modify"): [(0, " Modified\n", "")], **recorded_reads()})
    ended = run_module(sa.main, dict(account="proj-a", max_jobs=9), slurm)
    assert ended.failed and "still differs" in ended.result["msg"] and "maxjobs=9" in ended.result["msg"]


def test_module_reports_sacctmgr_errors():
    error = INDEX["modify_account_unknown_qos"]
    slurm = ReplaySlurm({("sacctmgr", "-i", "modify"): [(error["rc"], "", error["stderr"])], **recorded_reads()})
    ended = run_module(sa.main, dict(account="proj-a", qos=["nosuch"]), slurm)
    assert ended.failed and "bad qos 'nosuch'" in ended.result["msg"]


def test_module_check_mode_runs_nothing():
    slurm = ReplaySlurm(recorded_reads())
    result = run_module(sa.main, dict(account="proj-a", max_jobs=9), slurm, check_mode=True).result
    assert result["changed"] is True
    assert result["commands"] == ["sacctmgr -i modify account where name=proj-a set maxjobs=9"]
    assert not slurm.called("-i")


def test_module_rejects_uppercase_before_touching_slurm():
    slurm = ReplaySlurm({})
    ended = run_module(sa.main, dict(account="ProjA"), slurm)
    assert ended.failed and "'proja'" in ended.result["msg"] and slurm.calls == []


def test_sacctmgr_really_mangles_odd_names_and_pipes_break_parsable_output():
    stored = text("accounts_mangled").splitlines()
    assert {"a|a|a", "b|b|b", "it`s|it`s|it`s"} <= set(stored)  # 'a,b' split in two, quote -> backtick
    assert "Unknown option: x=y" in INDEX["add_account_equals"]["stderr"]  # '=' is read as an option
    with pytest.raises(ValueError):
        parse_parsable(text("accounts_mangled"), ACCOUNT_COLUMNS)  # 'piped|a|b|piped' has 4 fields
    for name in ("a,b", "it's", "x=y"):
        assert sa.check_params(params(account=name))
    assert sa.check_params(params(description="a|b"))

"""slurm_node: decisions (ownership, idempotence) on real node states, and the module's flow."""

import pytest
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import node_summary, parse_nodes
from ansible_collections.gpuaas.apps.plugins.modules import slurm_node
from slurm_fixtures import ReplaySlurm, recorded, run_module, text

OURS = "gpuaas: maintenance window"


def facts(fixture, job_ids=()):
    return node_summary(parse_nodes(text(fixture))[0], list(job_ids))


@pytest.mark.parametrize(
    "fixture, state, reason, force, action",
    [
        # drain
        ("node_idle", "drain", OURS, False, "drain"),
        ("node_mixed", "drain", OURS, False, "drain"),
        ("node_drained", "drain", OURS, False, None),  # ours already: idempotent
        ("node_draining_mixed", "drain", OURS, False, None),
        ("node_drained", "drain", "gpuaas: other", False, "drain"),  # ours, new reason text
        ("node_drained_foreign", "drain", OURS, True, "drain"),  # forced takeover
        ("node_down", "drain", "gpuaas: broken gpu", False, "drain"),  # our down -> drain
        # resume
        ("node_idle", "resume", None, False, None),
        ("node_drained", "resume", None, False, "resume"),
        ("node_down_drain", "resume", None, False, "resume"),
        ("node_resumed_not_responding", "resume", None, False, None),
        ("node_drained_foreign", "resume", None, True, "resume"),
        # down
        ("node_idle", "down", "gpuaas: broken gpu", False, "down"),
        ("node_down", "down", "gpuaas: broken gpu", False, None),
        ("node_down_drain", "down", "gpuaas: broken gpu", False, None),
        ("node_drained", "down", "gpuaas: broken gpu", False, "down"),
    ],
)
def test_plan(fixture, state, reason, force, action):
    planned, warning = slurm_node.plan_change(facts(fixture), state, reason, "gpuaas", force)
    assert planned == action
    assert warning is None


def test_foreign_drain_is_left_alone_with_a_warning():
    action, warning = slurm_node.plan_change(facts("node_drained_foreign"), "drain", OURS, "gpuaas", False)
    assert action is None
    assert "someone else" in warning and "slinky: gpu xid 79" in warning


@pytest.mark.parametrize(
    "fixture, state",
    [
        ("node_drained_foreign", "resume"),
        ("node_drained_foreign", "down"),
    ],
)
def test_foreign_drain_is_never_cleared_or_overwritten_without_force(fixture, state):
    reason = None if state == "resume" else "gpuaas: x"
    with pytest.raises(slurm_node.Refused, match="someone else.*force=true"):
        slurm_node.plan_change(facts(fixture), state, reason, "gpuaas", False)


def test_another_owner_is_foreign_too():
    with pytest.raises(slurm_node.Refused):
        slurm_node.plan_change(facts("node_drained"), "resume", None, "other-team", False)


def test_predict():
    assert slurm_node.predict(facts("node_mixed"), "drain", OURS) == {"state": "MIXED+DRAIN", "reason": OURS}
    assert slurm_node.predict(facts("node_down_drain"), "resume", None) == {"state": "IDLE", "reason": ""}
    assert slurm_node.predict(facts("node_idle"), "down", "gpuaas: x") == {
        "state": "DOWN",
        "reason": "gpuaas: x",
    }
    assert slurm_node.predict(facts("node_drained"), None, None) == {"state": "IDLE+DRAIN", "reason": OURS}


# ---- the module's flow against recorded Slurm answers ------------------------------------------------------
def args(**kw):
    return dict(dict(name="gpu01", poll_interval=0.01, timeout=5), **kw)


def test_read_only():
    slurm = ReplaySlurm(
        {("scontrol", "show"): [recorded("node_mixed")], ("squeue",): [recorded("squeue_node_two_jobs")]}
    )
    result = run_module(slurm_node.main, args(), slurm).result
    assert result["changed"] is False
    assert result["state"] == "MIXED" and result["running_jobs"] == 2 and result["job_ids"] == ["1", "2"]
    assert not slurm.called("update")


def test_drain_and_wait_until_jobs_are_gone():
    slurm = ReplaySlurm(
        {
            ("scontrol", "update"): [(0, "", "")],
            ("scontrol", "show"): [
                recorded("node_idle"),
                recorded("node_draining_allocated"),
                recorded("node_draining_mixed"),
                recorded("node_drained"),
            ],
            ("squeue",): [
                recorded("squeue_node_two_jobs"),
                recorded("squeue_node_two_jobs"),
                (0, "2\n", ""),
                recorded("squeue_node_empty"),
            ],
        }
    )
    result = run_module(slurm_node.main, args(state="drain", reason="maintenance window", wait=True), slurm).result
    assert result["changed"] is True
    assert result["drained"] is True and result["state"] == "IDLE+DRAIN" and result["running_jobs"] == 0
    assert slurm.called("update") == [["scontrol", "update", "nodename=gpu01", "state=drain", f"reason={OURS}"]]
    assert result["diff"]["before"]["state"] == "IDLE" and result["diff"]["after"]["reason"] == OURS


def test_drain_wait_timeout_names_the_running_jobs():
    slurm = ReplaySlurm(
        {
            ("scontrol", "show"): [recorded("node_draining_allocated")],
            ("squeue",): [recorded("squeue_node_two_jobs")],
        }
    )
    ended = run_module(slurm_node.main, args(state="drain", reason="maintenance window", wait=True, timeout=0), slurm)
    assert ended.failed
    assert "timed out after 0s" in ended.result["msg"] and "ids: 1, 2" in ended.result["msg"]
    assert not slurm.called("update")  # already drained with our reason


def test_resume_waits_while_the_node_shows_not_responding():
    slurm = ReplaySlurm(
        {
            ("scontrol", "update"): [(0, "", "")],
            ("scontrol", "show"): [
                recorded("node_drained"),
                recorded("node_resumed_not_responding"),
                recorded("node_resumed_not_responding"),
                recorded("node_idle"),
            ],
            ("squeue",): [recorded("squeue_node_empty")],
        }
    )
    result = run_module(slurm_node.main, args(state="resume"), slurm).result
    assert result["changed"] is True and result["state"] == "IDLE" and result["responding"] is True
    assert len(slurm.called("show")) == 4


def test_resume_refuses_a_foreign_drain():
    slurm = ReplaySlurm(
        {
            ("scontrol", "show"): [recorded("node_drained_foreign")],
            ("squeue",): [recorded("squeue_node_empty")],
        }
    )
    ended = run_module(slurm_node.main, args(state="resume"), slurm)
    assert ended.failed and "someone else" in ended.result["msg"]
    assert ended.result["reason_owner"] == "slinky"
    assert not slurm.called("update")


def test_check_mode_changes_nothing_but_reports_the_diff():
    slurm = ReplaySlurm(
        {("scontrol", "show"): [recorded("node_mixed")], ("squeue",): [recorded("squeue_node_two_jobs")]}
    )
    result = run_module(slurm_node.main, args(state="drain", reason="x", wait=True), slurm, check_mode=True).result
    assert result["changed"] is True
    assert result["diff"]["after"] == {"state": "MIXED+DRAIN", "reason": "gpuaas: x"}
    assert not slurm.called("update")


def test_missing_node_fails_or_is_ok_with_missing_ok():
    slurm = ReplaySlurm({("scontrol", "show"): [recorded("node_missing")]})
    ended = run_module(slurm_node.main, args(name="nosuch", state="drain", reason="x"), slurm)
    assert ended.failed and "does not exist" in ended.result["msg"] and "missing_ok" in ended.result["msg"]
    ended = run_module(slurm_node.main, args(name="nosuch", state="drain", reason="x", missing_ok=True), slurm)
    assert not ended.failed and ended.result == {"changed": False, "node": "nosuch", "exists": False}


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(state="drain"), "missing: reason"),
        (dict(state="drain", reason="  "), "non-empty reason"),
        (dict(state="down", reason="a\nb"), "single line"),
        (dict(owner="has space"), "owner"),
    ],
)
def test_bad_parameters(bad, message):
    ended = run_module(slurm_node.main, args(**bad), ReplaySlurm({}))
    assert ended.failed and message in ended.result["msg"]

"""The health verdict (health/verdict.py): how hosts' answers become member states, rule by rule."""

from gpuaas_api.health.verdict import DETAIL_KEYS, HostAnswer, MemberView, judge

CTL, W1, W2 = "ctl", "w1", "w2"


def views(**statuses):
    """ctl is the status role's member (not asked); the workers are asked."""
    return [MemberView("m-ctl", CTL, statuses.get("ctl", "active"), asked=False),
            MemberView("m-w1", W1, statuses.get("w1", "active"), asked=True),
            MemberView("m-w2", W2, statuses.get("w2", "active"), asked=True)]


def ok(states=None, details=None):
    return HostAnswer(result={"member_states": states or {}, "member_details": details or {}})


def test_the_view_decides_unless_a_host_says_failed():
    answers = {CTL: ok({W1: "drained", W2: "active"}, {W1: {"node_state": "IDLE+DRAIN"}}),
               W1: ok({W1: "active"}), W2: ok({W2: "failed"}, {W2: {"reason": "slurmd is not running on w2"}})}
    v = judge(answers, {CTL}, views())
    assert v.control_plane and v.members["m-w1"].observed == "drained"
    assert v.members["m-w1"].details == {"node_state": "IDLE+DRAIN"}
    assert (v.members["m-w2"].observed, v.members["m-w2"].reason) == ("failed", "slurmd is not running on w2")
    assert v.members["m-ctl"].observed is None  # well and not failed: left as it is


def test_an_unreachable_host_fails_its_member_only_and_says_why():
    answers = {CTL: ok({W1: "active", W2: "active"}), W1: HostAnswer(unreachable="ssh: connect timed out"),
               W2: ok({W2: "active"})}
    v = judge(answers, {CTL}, views())
    w1 = v.members["m-w1"]
    assert (w1.observed, w1.reachable) == ("failed", False) and "ssh: connect timed out" in w1.reason
    assert v.members["m-w2"].observed == "active" and v.members["m-w2"].reachable


def test_a_dead_control_plane_fails_its_member_and_leaves_the_unjudged_alone():
    answers = {CTL: HostAnswer(failed="slurmctld does not answer"), W1: ok({W1: "active"}), W2: ok({})}
    v = judge(answers, {CTL}, views())
    assert not v.control_plane and "slurmctld does not answer" in v.control_plane_message
    assert v.members["m-ctl"].observed == "failed"
    assert v.members["m-w1"].observed == "active"  # its own host answered
    assert v.members["m-w2"].observed is None  # nobody judged it: unknown, not failed


def test_recovery_and_members_no_host_names():
    answers = {CTL: ok({W1: "active"}), W1: ok({W1: "active"}), W2: ok({})}
    v = judge(answers, {CTL}, views(ctl="failed", w1="failed"))
    assert v.members["m-ctl"].observed == "active" and v.members["m-w1"].observed == "active"
    assert v.members["m-w2"].observed == "failed" and v.members["m-w2"].reason == "no host reported w2"


def test_a_host_the_check_did_not_run_on_is_judged_by_the_view_alone():
    v = judge({CTL: ok({W1: "active", W2: "draining"})}, {CTL}, views())
    assert v.members["m-w1"].observed == "active" and v.members["m-w2"].observed == "draining"


def test_unknown_words_and_oversized_details_are_bounded():
    details = {f"k{i}": "x" * 500 for i in range(40)} | {"nested": {"a": 1}}
    v = judge({CTL: ok({W1: "exploded", W2: "active"}, {W2: details})}, {CTL}, views())
    assert v.members["m-w1"].observed == "failed" and "exploded" in v.members["m-w1"].reason
    kept = v.members["m-w2"].details
    assert len(kept) <= DETAIL_KEYS and all(len(x) == 200 for x in kept.values()) and "nested" not in kept


def test_a_member_on_a_host_that_another_members_node_shares_is_judged_by_its_host_alone():
    """A Slurm worker placed on the controller's host has the controller's node name: what the module says
    of that node is the worker's, never the controller's."""
    members = [MemberView("m-ctl", CTL, "active", asked=False), MemberView("m-wctl", CTL, "active", asked=True)]
    answers = {CTL: ok({CTL: "failed"}, {CTL: {"reason": "slurmd is not running on ctl"}})}
    v = judge(answers, {CTL}, members)
    assert v.members["m-wctl"].observed == "failed" and v.members["m-ctl"].observed is None
    v = judge(answers, {CTL}, [MemberView("m-ctl", CTL, "failed", asked=False)])
    assert v.members["m-ctl"].observed == "active"

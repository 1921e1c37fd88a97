"""The RKE2 modules' decisions: the quorum arithmetic, member and node states in the platform's words, the plan
rke2_etcd_member makes, and which pods a drain evicts and why some are left (all on data shaped as etcd and the
Kubernetes API return it; the integration test runs them against a real etcd)."""

import pytest
from ansible_collections.gpuaas.apps.plugins.module_utils import rke2
from ansible_collections.gpuaas.apps.plugins.modules import rke2_etcd_member, rke2_info


def member(name, healthy=True, learner=False, peer=None):
    return {"id": str(abs(hash(name)) % 10**12), "name": name, "node": rke2.node_of_member(name),
            "peer_urls": [peer or f"https://{name}:2380"], "client_urls": [], "learner": learner,
            "healthy": healthy, "leader": False, "error": None if healthy else "connection refused"}


def test_member_names_map_to_nodes():
    assert rke2.node_of_member("server-1-0a1b2c3d") == "server-1"
    assert rke2.node_of_member("s1") == "s1"
    assert rke2.node_of_member("") == ""


@pytest.mark.parametrize("voters, needed", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_quorum_is_a_majority(voters, needed):
    assert rke2.quorum_needed(voters) == needed


def test_removing_a_healthy_member_of_three_keeps_quorum():
    members = [member("s1-00000001"), member("s2-00000002"), member("s3-00000003")]
    assert rke2.removal_problem(members, "s3-00000003") is None


def test_removal_that_loses_quorum_is_refused_with_the_arithmetic():
    members = [member("s1-00000001"), member("s2-00000002"), member("s3-00000003", healthy=False)]
    problem = rke2.removal_problem(members, "s2-00000002")
    assert problem == ("removing etcd member s2-00000002 would lose quorum: 1 of the 2 remaining voting members are "
                       "healthy, and 2 members need 2 (a majority) to keep quorum")
    # Removing the dead one is what restores the cluster's margin.
    assert rke2.removal_problem(members, "s3-00000003") is None


def test_the_last_member_and_learners():
    assert "would leave no member" in rke2.removal_problem([member("s1-00000001")], "s1-00000001")
    members = [member("s1-00000001"), member("s2-00000002", healthy=False, learner=True)]
    assert rke2.removal_problem(members, "s2-00000002") is None
    assert rke2.quorum_summary(members) == {"voters": 1, "healthy": 1, "needed": 1, "has_quorum": True,
                                            "can_lose": 0}


def test_etcd_member_plan():
    members = [member("s1-00000001"), member("s2-00000002"), member("s3-00000003", healthy=False)]
    params = {"name": "s2", "state": "absent", "peer_url": None, "learner": False}
    change, found, problem = rke2_etcd_member.plan(members, params)
    assert (change, found["name"]) == ("remove", "s2-00000002") and "would lose quorum" in problem
    assert rke2_etcd_member.plan(members, dict(params, name="s9")) == (None, None, None)
    assert rke2_etcd_member.plan(members, dict(params, name=None)) == (None, None, None)
    present = dict(params, state="present", peer_url="https://s1-00000001:2380")
    assert rke2_etcd_member.plan(members, present)[0] is None
    change, dummy, problem = rke2_etcd_member.plan(members, dict(present, peer_url="https://s4:2380"))
    assert change == "add" and problem.startswith("adding a voting member at https://s4:2380 would lose quorum")
    assert rke2_etcd_member.plan(members, dict(present, peer_url="https://s4:2380", learner=True))[2] is None


def node(name, ready="True", unschedulable=False, roles=("control-plane", "etcd")):
    return {"metadata": {"name": name, "labels": {"node-role.kubernetes.io/" + r: "true" for r in roles}},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True"
                                       else "NodeStatusUnknown", "message": "m"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.3"}}}


def test_node_states_in_the_platforms_words():
    assert rke2.node_state(rke2.node_summary(node("a"))) == "active"
    assert rke2.node_state(rke2.node_summary(node("a", ready="Unknown"))) == "failed"
    assert rke2.node_state(rke2.node_summary(node("a", unschedulable=True))) == "drained"
    assert rke2.node_state(rke2.node_summary(node("a", unschedulable=True)), pods_left=2) == "draining"
    assert rke2.node_state(None) == "failed"


def test_info_judges_servers_by_their_etcd_member_too():
    raw = (node("s1"), node("s2"), node("a1", roles=()), node("a2", ready="False", roles=()))
    nodes = [rke2.node_summary(n) for n in raw]
    etcd = [member("s1-00000001"), member("s2-00000002", healthy=False)]
    states, details = rke2_info.judge(["s1.example.org", "s2", "a1", "a2", "gone"], nodes, etcd)
    assert states == {"s1.example.org": "active", "s2": "failed", "a1": "active", "a2": "failed", "gone": "failed"}
    assert details["s2"]["reason"] == "etcd member s2-00000002 is unhealthy: connection refused"
    assert details["s1.example.org"]["etcd_member"] == "s1-00000001" and details["s1.example.org"]["etcd_healthy"]
    assert details["a2"]["reason"].startswith("node a2 is not Ready (NodeStatusUnknown)")
    assert details["gone"]["reason"] == "node gone is not in the cluster (the API does not know it)"
    assert all(len(d) <= 16 for d in details.values())


def pod(name, namespace="default", owner="ReplicaSet", labels=None, phase="Running", annotations=None):
    meta = {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    return {"metadata": meta, "status": {"phase": phase}}


def test_a_drain_evicts_all_but_running_daemonset_pods_and_mirrors_as_kubectl_does():
    pods = [pod("web-1"), pod("canal", owner="DaemonSet"), pod("done", owner="DaemonSet", phase="Succeeded"),
            pod("etcd-s1", owner="Node", annotations={rke2.MIRROR_POD_ANNOTATION: "x"}), pod("bare", owner=None),
            pod("job-done", owner=None, phase="Failed")]
    assert [rke2.pod_name(p) for p in rke2.drain_pods(pods)] == ["default/bare", "default/done", "default/job-done",
                                                                 "default/web-1"]
    assert [p["metadata"]["name"] for p in pods if rke2.unmanaged(p)] == ["bare"]  # a finished one can go


@pytest.mark.parametrize("selector, selected", [
    (None, False),
    ({}, True),
    ({"matchLabels": {"app": "web"}}, True),
    ({"matchLabels": {"app": "web", "tier": "db"}}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, False),
])
def test_budget_selectors_select_as_label_selectors_do(selector, selected):
    assert rke2.selects(selector, {"app": "web"}) is selected


def budget(name, allowed, namespace="default", app="web"):
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 2}}


def test_why_pods_are_left_after_a_drain():
    web = pod("web-1", labels={"app": "web"})
    api = pod("api-1", labels={"app": "api"})
    going = pod("old-1")
    going["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    other = pod("web-1", namespace="other", labels={"app": "web"})
    said = ('evicting pod default/api-1\nerror when evicting pods/"api-1" -n "default" (will retry after 5s): '
            "Cannot evict pod as it would violate the pod's disruption budget.\n")
    budgets = [budget("web", 0), budget("api", 1, app="api"), budget("web", 0, namespace="elsewhere")]
    reasons, blocking = rke2.why_left([web, api, going, other], budgets, said)
    assert reasons == {
        "default/web-1": "blocked by PodDisruptionBudget web",
        "default/api-1": "eviction refused: Cannot evict pod as it would violate the pod's disruption budget.",
        "default/old-1": "evicted, still terminating",
        "other/web-1": "not evicted yet",  # a budget only holds pods of its own namespace
    }
    assert blocking == [{"name": "default/web", "disruptions_allowed": 0, "current_healthy": 2, "desired_healthy": 2}]
    assert rke2.drain_timed_out_message("a1", 600, reasons, blocking).startswith(
        "node a1 not drained after 600s: 4 pod(s) left (default/api-1: eviction refused: ")
    assert rke2.pods_left_text(reasons, 2) == ("default/api-1: eviction refused: Cannot evict pod as it would violate "
                                               "the pod's disruption budget., default/old-1: evicted, still "
                                               "terminating, and 2 more")


class RefusingEtcd:
    """An etcd stand-in that refuses a membership change `refusals` times with the given error, then accepts it."""

    def __init__(self, refusals, error="etcd refused /v3/cluster/member/remove: etcdserver: unhealthy cluster"):
        self.refusals, self.error, self.removed = refusals, error, []

    def remove(self, member_id):
        if self.refusals:
            self.refusals -= 1
            raise rke2.Rke2Error(self.error)
        self.removed.append(member_id)


def test_a_member_removal_waits_out_etcds_strict_reconfiguration_check(monkeypatch):
    monkeypatch.setattr(rke2_etcd_member.time, "sleep", lambda seconds: None)
    etcd = RefusingEtcd(refusals=2)
    rke2_etcd_member.reconfigure(etcd, "remove", {"id": "42"}, {"settle": 30})
    assert etcd.removed == ["42"]


def test_other_refusals_and_a_spent_settle_time_fail_at_once(monkeypatch):
    monkeypatch.setattr(rke2_etcd_member.time, "sleep", lambda seconds: None)
    with pytest.raises(rke2.Rke2Error, match="member not found"):
        rke2_etcd_member.reconfigure(RefusingEtcd(1, "etcd refused: member not found"), "remove", {"id": "1"},
                                     {"settle": 30})
    with pytest.raises(rke2.Rke2Error, match="unhealthy cluster"):
        rke2_etcd_member.reconfigure(RefusingEtcd(1), "remove", {"id": "1"}, {"settle": 0})


def test_a_wait_for_a_restarted_node_also_waits_for_its_new_version():
    details = {"s1": {"reason": None, "kubelet_version": "v1.32.3+rke2r1"},
               "a1": {"reason": "node a1 is not Ready", "kubelet_version": "v1.32.5+rke2r1"}}
    states = {"s1": "drained", "a1": "failed"}
    ready = ("active", "draining", "drained")
    assert rke2_info.not_yet(states, details, ready, None) == {"a1": "failed: node a1 is not Ready"}
    assert rke2_info.not_yet(states, details, ready, "v1.32.5+rke2r1") == {
        "s1": "runs v1.32.3+rke2r1, not v1.32.5+rke2r1", "a1": "failed: node a1 is not Ready"}
    assert rke2_info.not_yet({"s1": "active"}, details, ("active",), "v1.32.3+rke2r1") == {}

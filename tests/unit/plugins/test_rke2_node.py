"""rke2_node: cordon, uncordon, drain (PodDisruptionBudgets, timeouts, pods without a controller), delete, check mode
and the drain's progress lines, against FakeKubectl.

FakeKubectl is a test double: a small executable that answers the kubectl calls rke2_node makes the way kubectl
1.32 does (its output, its exit codes, its drain's retry and timeout lines), keeping a cluster's nodes, pods and
PodDisruptionBudgets in a JSON file, and logging every argv it was run with. The module runs it for real through
run_command, and the action plugin's tests run the module through `ansible` on localhost. The real kubectl against
the RKE2 test double is tested by the integration tests.
"""

import json
import re
import sys
import time
from unittest import mock

import live_ansible
import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuaas.apps.plugins.modules import rke2_node

FAKE_KUBECTL = r'''#!%(python)s
"""Test double of kubectl: the calls rke2_node makes, answered from the cluster in %(state)s."""
import json, sys, time

STATE, CALLS = %(state)r, %(calls)r
argv = sys.argv[1:]
with open(CALLS, "a") as log:
    log.write(json.dumps(argv) + "\n")
words, i = [], 0
while i < len(argv):  # kubectl's global flags
    if argv[i] == "--kubeconfig":
        i += 2
        continue
    if not argv[i].startswith("--request-timeout="):
        words.append(argv[i])
    i += 1
with open(STATE) as handle:
    cluster = json.load(handle)


def save():
    with open(STATE, "w") as handle:
        json.dump(cluster, handle)


def out(text, code=0, err=""):
    sys.stdout.write(text)
    sys.stderr.write(err)
    sys.exit(code)


def name(pod):
    return "%%s/%%s" %% (pod["metadata"]["namespace"], pod["metadata"]["name"])


def listed(items):
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}})


def controller(pod):
    refs = [r for r in pod["metadata"].get("ownerReferences", []) if r.get("controller")]
    return refs[0] if refs else None


def budget(b):
    """Its status now: no disruption allowed for x-blocked-for seconds after the first drain began."""
    b = json.loads(json.dumps(b))
    blocked_for, first_drain = b.pop("x-blocked-for"), cluster.get("first_drain")
    blocked = blocked_for > 0 and (first_drain is None or time.time() < first_drain + blocked_for)
    b["status"] = {"disruptionsAllowed": 0 if blocked else 1, "currentHealthy": 1,
                   "desiredHealthy": 1 if blocked else 0}
    return b


def blocker(pod):
    for b in map(budget, cluster["budgets"]):
        selected = all(pod["metadata"].get("labels", {}).get(k) == v
                       for k, v in b["spec"]["selector"]["matchLabels"].items())
        if b["metadata"]["namespace"] == pod["metadata"]["namespace"] and selected:
            return b if b["status"]["disruptionsAllowed"] < 1 else None
    return None


def not_found(node):
    out("", 1, 'Error from server (NotFound): nodes "%%s" not found\n' %% node)


def cordon(node, on, quiet=False):
    if node not in cluster["nodes"]:
        not_found(node)
    spec = cluster["nodes"][node]["spec"]
    was = bool(spec.get("unschedulable"))
    if on:
        spec["unschedulable"] = True
    else:
        spec.pop("unschedulable", None)
    save()
    return "node/%%s %%s\n" %% (node, ("already " if was == on else "") + ("cordoned" if on else "uncordoned"))


if words[:1] == ["get"]:
    kind, rest = words[1], words[2:]
    if kind == "node" and "--ignore-not-found" in rest:
        found = cluster["nodes"].get(rest[0])
        out(json.dumps(found) if found else "")
    if kind == "nodes":
        out(listed(list(cluster["nodes"].values())))
    if kind == "pods" and "--all-namespaces" in rest:
        node = rest[rest.index("--field-selector") + 1].split("=", 1)[1]
        out(listed([p for p in cluster["pods"] if p["spec"]["nodeName"] == node]))
    if kind == "poddisruptionbudgets":
        out(listed([budget(b) for b in cluster["budgets"]]))
elif words[:1] in (["cordon"], ["uncordon"]):
    out(cordon(words[1], words[0] == "cordon"))
elif words[:2] == ["delete", "node"]:
    if words[2] not in cluster["nodes"]:
        not_found(words[2])
    del cluster["nodes"][words[2]]
    save()
    out('node "%%s" deleted\n' %% words[2])
elif words[:1] == ["drain"]:
    node, flags = words[1], words[2:]
    assert "--ignore-daemonsets" in flags and "--delete-emptydir-data" in flags, flags
    timeout = int([f for f in flags if f.startswith("--timeout=")][0][len("--timeout="):-1])
    cluster["first_drain"] = cluster.get("first_drain") or time.time()
    stdout = cordon(node, True)
    pods = [p for p in cluster["pods"] if p["spec"]["nodeName"] == node
            and (controller(p) or {}).get("kind") != "DaemonSet"
            and "kubernetes.io/config.mirror" not in p["metadata"].get("annotations", {})]
    bare = [name(p) for p in pods if controller(p) is None]
    if bare and "--force" not in flags:
        why = "cannot delete Pods that declare no controller (use --force to override): " + ", ".join(bare)
        out(stdout, 1, 'error: unable to drain node "%%s" due to error: %%s, continuing command...\n'
            'There are pending nodes to be drained:\n %%s\nerror: %%s\n' %% (node, why, node, why))
    deadline, err = time.time() + timeout, ""
    for pod in pods:
        stdout += "evicting pod %%s\n" %% name(pod)
    while pods:
        for pod in list(pods):
            failure = pod["metadata"].get("annotations", {}).get("x-eviction-error")
            if failure:  # the API answers the eviction with an error that is no 429: kubectl gives up at once
                why = 'error when evicting pods/"%%s" -n "%%s": %%s' %% (
                    pod["metadata"]["name"], pod["metadata"]["namespace"], failure)
                out(stdout, 1, err + 'error: unable to drain node "%%s" due to error: %%s, continuing command...\n'
                    'There are pending nodes to be drained:\n %%s\nerror: %%s\n' %% (node, why, node, why))
            if blocker(pod):
                err += ('error when evicting pods/"%%s" -n "%%s" (will retry after 5s): Cannot evict pod as it would '
                        'violate the pod\'s disruption budget.\n'
                        %% (pod["metadata"]["name"], pod["metadata"]["namespace"]))
                continue
            cluster["pods"].remove(pod)
            pods.remove(pod)
            save()
            stdout += "pod/%%s evicted\n" %% pod["metadata"]["name"]
        if pods and time.time() >= deadline:
            why = 'error when evicting pods/"%%s" -n "%%s": global timeout reached: %%ds' %% (
                pods[0]["metadata"]["name"], pods[0]["metadata"]["namespace"], timeout)
            out(stdout, 1, err + 'error: unable to drain node "%%s" due to error: %%s, continuing command...\n'
                'There are pending nodes to be drained:\n %%s\nerror: %%s\n' %% (node, why, node, why))
        time.sleep(0.1)
    out(stdout + "node/%%s drained\n" %% node)
out("", 1, "error: unknown command %%r for kubectl test double\n" %% words)
'''


def node_object(name, unschedulable=False):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "uid-" + name,
                         "labels": {"kubernetes.io/hostname": name, "node-role.kubernetes.io/worker": "true"}},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.21"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.3"}}}


def pod_object(name, node="a1", namespace="default", owner="ReplicaSet", labels=None, mirror=False):
    meta = {"name": name, "namespace": namespace, "uid": "uid-" + name, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": name.rsplit("-", 1)[0],
                                    "uid": "owner", "controller": True}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": node},
            "status": {"phase": "Running"}}


def budget_object(name, app, blocked_for=0.0, namespace="default"):
    """A PodDisruptionBudget that allows no disruption until ``blocked_for`` seconds after the first drain began,
    then one (the double's own key, not in what it answers)."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
            "x-blocked-for": blocked_for}


class FakeKubectl:
    """The test double (see the module's docstring): ``path`` to run, ``cluster()`` to read or ``set()`` what it
    serves, ``calls()`` for the argv it was run with (kubectl's global flags left out)."""

    def __init__(self, tmp_path):
        self.state, self.log = tmp_path / "cluster.json", tmp_path / "calls.jsonl"
        self.path = tmp_path / "kubectl"
        self.path.write_text(FAKE_KUBECTL % {"python": sys.executable, "state": str(self.state),
                                             "calls": str(self.log)})
        self.path.chmod(0o755)
        self.log.write_text("")
        self.set(nodes=[node_object("a1")])

    def set(self, nodes=(), pods=(), budgets=()):
        self.state.write_text(json.dumps({"nodes": {n["metadata"]["name"]: n for n in nodes}, "pods": list(pods),
                                          "budgets": list(budgets)}))

    def cluster(self):
        return json.loads(self.state.read_text())

    def calls(self, *verbs):
        calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        assert all(c[:2] == ["--kubeconfig", "/etc/rancher/rke2/rke2.yaml"] for c in calls)
        words = [[w for w in c[2:] if not w.startswith("--request-timeout=")] for c in calls]
        return [w for w in words if not verbs or w[0] in verbs]

    def changes(self):
        return self.calls("cordon", "uncordon", "drain", "delete")


@pytest.fixture
def kubectl(tmp_path):
    return FakeKubectl(tmp_path)


class Ended(Exception):
    def __init__(self, result, failed):
        super().__init__(result.get("msg", ""))
        self.result, self.failed = result, failed


def run(kubectl, check_mode=False, **args):
    """The module's main() with ``args``, running the test double as its kubectl; the result it ended with."""
    args = dict(dict(name="a1", kubectl=str(kubectl.path), timeout=5), **args)
    args = dict((k, v) for k, v in args.items() if v is not None)  # an option left out, as Ansible does
    if check_mode:
        args["_ansible_check_mode"] = True

    warnings = []

    def exit_json(module, **result):
        raise Ended(dict(result, warnings=warnings), failed=False)

    def fail_json(module, msg, **result):
        raise Ended(dict(result, msg=msg), failed=True)

    with (
        patch_module_args(args),
        mock.patch.object(basic.AnsibleModule, "exit_json", exit_json),
        mock.patch.object(basic.AnsibleModule, "fail_json", fail_json),
        mock.patch.object(basic.AnsibleModule, "warn", lambda module, warning: warnings.append(warning)),
        pytest.raises(Ended) as ended,
    ):
        rke2_node.main()
    return ended.value


def ok(ended):
    assert not ended.failed, ended.result["msg"]
    return ended.result


def web_cluster(kubectl, blocked_for=None, extra_pods=()):
    """a1 runs web-1 (a Deployment's), a DaemonSet's pod and a static pod's mirror; with ``blocked_for``, the budget
    of web holds web-1 that long."""
    pods = [pod_object("web-1", labels={"app": "web"}), pod_object("canal-x", owner="DaemonSet"),
            pod_object("kube-proxy-a1", namespace="kube-system", owner="Node", mirror=True), *extra_pods,
            pod_object("web-2", node="a2", labels={"app": "web"})]
    budgets = [] if blocked_for is None else [budget_object("web", "web", blocked_for)]
    kubectl.set(nodes=[node_object("a1"), node_object("a2")], pods=pods, budgets=budgets)


# ---- cordon and uncordon ------------------------------------------------------------------------------------------
def test_cordon_then_again_changes_nothing(kubectl):
    result = ok(run(kubectl, state="cordoned"))
    assert result["changed"] is True and result["node"]["unschedulable"] is True and result["state"] == "drained"
    assert result["diff"] == {"before": {"exists": True, "unschedulable": False, "pods": []},
                              "after": {"exists": True, "unschedulable": True, "pods": []}}
    assert kubectl.changes() == [["cordon", "a1"]]
    assert kubectl.cluster()["nodes"]["a1"]["spec"]["unschedulable"] is True

    result = ok(run(kubectl, state="cordoned"))
    assert result["changed"] is False and result["node"]["unschedulable"] is True
    assert kubectl.changes() == [["cordon", "a1"]]


def test_cordon_evicts_nothing_and_the_node_is_draining(kubectl):
    web_cluster(kubectl)
    result = ok(run(kubectl, state="cordoned"))
    assert result["state"] == "draining" and result["pods_left"] == ["default/web-1"] and result["evicted"] == []
    assert len(kubectl.cluster()["pods"]) == 4


def test_uncordon_then_again_changes_nothing(kubectl):
    kubectl.set(nodes=[node_object("a1", unschedulable=True)])
    result = ok(run(kubectl, state="schedulable"))
    assert result["changed"] is True and result["node"]["unschedulable"] is False and result["state"] == "active"
    assert kubectl.changes() == [["uncordon", "a1"]]
    assert "unschedulable" not in kubectl.cluster()["nodes"]["a1"]["spec"]
    assert ok(run(kubectl, state="schedulable"))["changed"] is False
    assert kubectl.changes() == [["uncordon", "a1"]]


def test_without_state_it_only_reads(kubectl):
    web_cluster(kubectl)
    result = ok(run(kubectl))
    assert result["changed"] is False and result["state"] == "active" and result["pods_left"] == ["default/web-1"]
    assert result["node"]["name"] == "a1" and result["node"]["exists"] is True and result["node"]["roles"] == ["worker"]
    assert kubectl.changes() == []


# ---- drain --------------------------------------------------------------------------------------------------------
def test_drain_evicts_all_but_daemonsets_and_mirrors_then_is_idempotent(kubectl):
    web_cluster(kubectl)
    result = ok(run(kubectl, state="drained"))
    assert result["changed"] is True and result["evicted"] == ["default/web-1"] and result["pods_left"] == []
    assert result["state"] == "drained" and result["node"]["unschedulable"] is True
    assert result["diff"]["before"] == {"exists": True, "unschedulable": False, "pods": ["default/web-1"]}
    assert result["diff"]["after"] == {"exists": True, "unschedulable": True, "pods": []}
    assert kubectl.changes() == [["drain", "a1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5s"]]
    assert sorted(p["metadata"]["name"] for p in kubectl.cluster()["pods"]) == ["canal-x", "kube-proxy-a1", "web-2"]

    again = ok(run(kubectl, state="drained"))
    assert again["changed"] is False and again["evicted"] == [] and again["state"] == "drained"
    assert len(kubectl.changes()) == 1


def test_drain_of_a_cordoned_node_with_pods_left_evicts_them(kubectl):
    web_cluster(kubectl)
    ok(run(kubectl, state="cordoned"))
    result = ok(run(kubectl, state="drained"))
    assert result["changed"] is True and result["evicted"] == ["default/web-1"]


def test_drain_blocked_by_a_budget_fails_at_the_timeout_naming_pod_and_budget(kubectl):
    web_cluster(kubectl, blocked_for=3600)
    started = time.monotonic()
    ended = run(kubectl, state="drained", timeout=1)
    assert ended.failed and 1 <= time.monotonic() - started < 5
    assert ended.result["msg"] == (
        "node a1 not drained after 1s: 1 pod(s) left (default/web-1: blocked by PodDisruptionBudget web); "
        "PodDisruptionBudget default/web allows 0 disruption(s): 1 pod(s) healthy, 1 needed")
    assert ended.result["timed_out"] is True and ended.result["changed"] is True  # it did cordon
    assert ended.result["pods_left"] == ["default/web-1"] and ended.result["state"] == "draining"
    assert ended.result["pods_left_reasons"] == {"default/web-1": "blocked by PodDisruptionBudget web"}
    assert kubectl.cluster()["nodes"]["a1"]["spec"]["unschedulable"] is True


def test_a_refusal_no_budget_explains_is_named_in_kubectls_words(kubectl):
    # The budgets read after the drain no longer hold web-1 (say, one changed meanwhile): kubectl's retry line is
    # what the module knows.
    web_cluster(kubectl, blocked_for=3600)
    with mock.patch.object(rke2_node.Kubectl, "budgets", lambda self: []):
        ended = run(kubectl, state="drained", timeout=1)
    assert ended.failed and ended.result["pods_left_reasons"] == {
        "default/web-1": "eviction refused: Cannot evict pod as it would violate the pod's disruption budget."}


def test_a_drain_kubectl_gives_up_on_fails_at_once_in_its_words(kubectl):
    broken = pod_object("api-1")
    broken["metadata"]["annotations"] = {"x-eviction-error": "Internal error occurred: etcdserver: request timed out"}
    web_cluster(kubectl, extra_pods=[broken])
    ended = run(kubectl, state="drained", timeout=30)
    assert ended.failed and "timed_out" not in ended.result
    assert ended.result["msg"] == (
        'kubectl drain a1 failed (rc=1): error when evicting pods/"api-1" -n "default": Internal error occurred: '
        "etcdserver: request timed out; 1 pod(s) left (default/api-1: not evicted yet)")
    assert ended.result["evicted"] == ["default/web-1"] and ended.result["changed"] is True


def test_pods_without_a_controller_are_refused_without_force(kubectl):
    web_cluster(kubectl, extra_pods=[pod_object("debug", owner=None)])
    ended = run(kubectl, state="drained")
    assert ended.failed and ended.result["msg"] == (
        "node a1 runs pods that declare no controller, which a drain would delete for good: default/debug; "
        "force=true evicts them anyway")
    assert kubectl.changes() == [] and ended.result["changed"] is False

    result = ok(run(kubectl, state="drained", force=True))
    assert result["evicted"] == ["default/debug", "default/web-1"]
    assert kubectl.changes()[-1][-1] == "--force"


def test_drain_check_mode_reports_what_would_be_evicted_and_changes_nothing(kubectl):
    web_cluster(kubectl, blocked_for=3600)
    before = kubectl.cluster()
    result = ok(run(kubectl, check_mode=True, state="drained"))
    assert result["changed"] is True and result["evicted"] == ["default/web-1"]
    assert result["diff"]["after"] == {"exists": True, "unschedulable": True, "pods": []}
    assert result["node"]["unschedulable"] is False and result["pods_left"] == ["default/web-1"]
    assert result["warnings"] == ["default/web-1 would wait: PodDisruptionBudget web allows no disruption now"]
    assert kubectl.changes() == [] and kubectl.cluster() == before


def test_check_mode_of_cordon_and_delete_changes_nothing(kubectl):
    assert ok(run(kubectl, check_mode=True, state="cordoned"))["changed"] is True
    result = ok(run(kubectl, check_mode=True, state="absent"))
    assert result["changed"] is True and result["diff"]["after"]["exists"] is False
    assert kubectl.changes() == [] and "unschedulable" not in kubectl.cluster()["nodes"]["a1"]["spec"]


# ---- missing nodes and delete -------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", ["schedulable", "cordoned", "drained", None])
def test_a_missing_node_fails_unless_missing_ok(kubectl, state):
    ended = run(kubectl, name="a9", state=state)
    assert ended.failed and ended.result["msg"] == ("node a9 does not exist in the cluster (the API does not know "
                                                    "it); use missing_ok=true if that is fine")
    result = ok(run(kubectl, name="a9", state=state, missing_ok=True))
    assert result == {"changed": False, "node": {"name": "a9", "exists": False}, "state": "absent", "evicted": [],
                      "pods_left": [], "warnings": []}
    assert kubectl.changes() == []


def test_delete_then_again_changes_nothing(kubectl):
    web_cluster(kubectl)
    result = ok(run(kubectl, state="absent"))
    assert result["changed"] is True and result["node"] == {"name": "a1", "exists": False}
    assert result["state"] == "absent"
    assert result["diff"] == {"before": {"exists": True, "unschedulable": False, "pods": ["default/web-1"]},
                              "after": {"exists": False, "unschedulable": False, "pods": []}}
    assert kubectl.changes() == [["delete", "node", "a1"]] and "a1" not in kubectl.cluster()["nodes"]
    assert ok(run(kubectl, state="absent"))["changed"] is False
    assert len(kubectl.changes()) == 1


def test_a_kubectl_failure_is_one_line_with_its_words(kubectl):
    kubectl.path.write_text("#!/bin/sh\necho 'The connection to the server 127.0.0.1:6443 was refused' >&2\nexit 1\n")
    ended = run(kubectl, state="cordoned")
    assert ended.failed and ended.result["msg"] == (
        "kubectl get node a1 --ignore-not-found -o json failed (rc=1): "
        "The connection to the server 127.0.0.1:6443 was refused")


@pytest.mark.parametrize("name", ["--all", "A1", "a1;reboot", "a1 --force", "-a1", ""])
def test_names_that_are_no_node_names_are_refused_before_kubectl_runs(kubectl, name):
    ended = run(kubectl, name=name, state="drained")
    assert ended.failed and "is not a node name" in ended.result["msg"]
    assert kubectl.calls() == []


def test_bad_timeouts(kubectl):
    ended = run(kubectl, state="drained", timeout=0)
    assert ended.failed and ended.result["msg"] == "timeout must be at least 1 and progress_interval at least 0"


# ---- the action plugin: a drain in steps, with progress lines ----------------------------------------------------
def ansible(tmp_path, kubectl, **args):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"s1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return live_ansible.run(inventory, "s1", "rke2_node", dict(dict(name="a1", kubectl=str(kubectl.path)), **args),
                            diff=True)


def test_a_waiting_drain_prints_progress_then_succeeds(tmp_path, kubectl):
    web_cluster(kubectl, blocked_for=2.5)
    result, output = ansible(tmp_path, kubectl, state="drained", timeout=60, progress_interval=1)
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True and result["evicted"] == ["default/web-1"] and result["state"] == "drained"
    assert result["diff"]["before"]["pods"] == ["default/web-1"] and result["diff"]["after"]["pods"] == []
    lines = [line for line in output.splitlines() if "still draining" in line]
    assert 1 <= len(lines) <= 3, output
    assert re.fullmatch(r"\[s1\] rke2_node a1: still draining, 1 pod\(s\) left \(default/web-1: blocked by "
                        r"PodDisruptionBudget web\); waited \d+s of 60s", lines[0]), lines
    # Read after a step, the budget may allow the eviction already: then kubectl's refusal is the reason.
    assert all(re.fullmatch(r"\[s1\] rke2_node a1: still draining, 1 pod\(s\) left \(default/web-1: (blocked by "
                            r"PodDisruptionBudget web|eviction refused: Cannot evict pod as it would violate the pod's "
                            r"disruption budget\.)\); waited \d+s of 60s", line) for line in lines), lines
    steps = kubectl.calls("drain")
    assert len(steps) == len(lines) + 1 and all(s[-1] == "--timeout=1s" for s in steps)


def test_a_drain_blocked_until_the_timeout_fails_naming_the_whole_wait(tmp_path, kubectl):
    web_cluster(kubectl, blocked_for=3600)
    result, output = ansible(tmp_path, kubectl, state="drained", timeout=6, progress_interval=2)
    assert result["failed"] is True and result["timed_out"] is True and result["changed"] is True
    assert result["msg"] == ("node a1 not drained after 6s: 1 pod(s) left (default/web-1: blocked by "
                             "PodDisruptionBudget web); PodDisruptionBudget default/web allows 0 disruption(s): "
                             "1 pod(s) healthy, 1 needed")
    steps = [s[-1] for s in kubectl.calls("drain")]
    # Steps of 2 s (the last one what is left of the 6 s), each but the last followed by a line.
    assert 2 <= len(steps) <= 3 and steps[0] == "--timeout=2s", steps
    assert output.count("still draining") == len(steps) - 1


def test_without_progress_the_drain_is_one_step(tmp_path, kubectl):
    web_cluster(kubectl)
    result, output = ansible(tmp_path, kubectl, state="drained", timeout=7, progress_interval=0)
    assert result["changed"] is True and result["evicted"] == ["default/web-1"]
    assert [s[-1] for s in kubectl.calls("drain")] == ["--timeout=7s"] and "still draining" not in output

"""The RKE2 TEST DOUBLE (tests/rke2_double/) against the real kubectl: cordon, drain and uncordon with a workload
and a PodDisruptionBudget, the eviction API's refusal, garbage collection, and the running version on the nodes.

One server and two agents on Debian 13 test hosts, deployed with the collection's rke2_deploy, then driven as the
roles drive RKE2: Debian's kubectl at /var/lib/rancher/rke2/bin/kubectl with /etc/rancher/rke2/rke2.yaml. Every
answer kubectl gets must be the one a real kube-apiserver gives, or kubectl itself fails: this is what makes the
double fit for the node removal, drain and upgrade tests. The tests run in order on one cluster.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
import uuid

import pytest

from .rke2_harness import VERSION, start, workload

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

SERVERS = ["s1"]
AGENTS = ["a1", "a2"]
NODES = sorted([*SERVERS, *AGENTS])
KUBECTL = "/var/lib/rancher/rke2/bin/kubectl --kubeconfig /etc/rancher/rke2/rke2.yaml"
DRAIN = "drain --ignore-daemonsets --delete-emptydir-data"
BUDGET_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."
# The eviction API's answer, read with the admin token of rke2.yaml: kubectl prints only its message.
EVICT = """import base64, json, ssl, sys, urllib.error, urllib.request, yaml
config = yaml.safe_load(open("/etc/rancher/rke2/rke2.yaml"))
cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
name = sys.argv[1]
body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}
request = urllib.request.Request(cluster["server"] + "/api/v1/namespaces/default/pods/%s/eviction" % name,
                                 data=json.dumps(body).encode(), headers={"Authorization": "Bearer " + user["token"],
                                                                          "Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(request, context=context).read().decode())
except urllib.error.HTTPError as error:
    print(error.read().decode())
"""
# Every key in etcd under /registry/, read on the server with RKE2's etcd client certificate.
ETCD_KEYS = """import base64, json, ssl, urllib.request
tls = "/var/lib/rancher/rke2/server/tls/etcd/"
context = ssl.create_default_context(cafile=tls + "server-ca.crt")
context.load_cert_chain(tls + "server-client.crt", tls + "server-client.key")
body = {"key": base64.b64encode(b"/registry/").decode(), "range_end": base64.b64encode(b"/registry0").decode(),
        "keys_only": True}
request = urllib.request.Request("https://127.0.0.1:2379/v3/kv/range", data=json.dumps(body).encode())
for kv in json.load(urllib.request.urlopen(request, context=context)).get("kvs", []):
    print(base64.b64decode(kv["key"]).decode())
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = start(f"rd{uuid.uuid4().hex[:6]}", tmp_path_factory.mktemp("rke2_double"), SERVERS, AGENTS)
    try:
        run = cluster.playbook("rke2_deploy")
        assert run.rc == 0, run.output[-4000:]
        yield cluster
    finally:
        cluster.stop()


def kubectl(cluster, args: str, check: bool = True) -> str:
    """kubectl on the server; with check=False, its output (stderr too) and exit status as a last line rc=N."""
    if check:
        return cluster.kubectl("s1", args)
    return cluster.sh("s1", f"{KUBECTL} {args} 2>&1; echo rc=$?", check=False)


def get(cluster, args: str) -> dict:
    return json.loads(kubectl(cluster, f"get {args} -o json"))


def web_pods(cluster) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in get(cluster, "pods -l app=web")["items"]}


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def wait_for(predicate, what: str, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what} after {seconds} s"
        time.sleep(0.5)
    return value


def running_web(cluster, count: int = 2) -> dict[str, str]:
    """Waits until the workload has `count` Ready pods; returns {pod: node}."""
    def placed():
        pods = web_pods(cluster)
        return len(pods) == count and all(map(ready, pods.values())) and {
            name: pod["spec"]["nodeName"] for name, pod in pods.items()}
    return wait_for(placed, f"the workload has no {count} Ready pods: {web_pods(cluster)}")


def apply_workload(cluster, min_available: int) -> str:
    manifest = workload(replicas=2, min_available=min_available)
    return cluster.sh("s1", f"{KUBECTL} apply --validate=false -f - <<'EOF'\n{manifest}EOF")


def table(cluster, args: str) -> list[dict[str, str]]:
    """`kubectl get` as people read it (the columns the API server renders), one dict per row."""
    header, *rows = kubectl(cluster, f"get {args}").splitlines()
    starts = [0] + [gap.end() for gap in re.finditer(r"  +", header)]
    columns = [(header[a:b].strip(), a, b) for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return [{name: row[a:b].strip() for name, a, b in columns} for row in rows]


def test_nodes_report_the_running_version(cluster):
    nodes = {row["NAME"]: row for row in table(cluster, "nodes")}
    assert sorted(nodes) == NODES
    assert {row["STATUS"] for row in nodes.values()} == {"Ready"}
    assert {row["VERSION"] for row in nodes.values()} == {VERSION}, nodes
    assert nodes["s1"]["ROLES"] == "control-plane,etcd,master" and nodes["a1"]["ROLES"] == "<none>"
    info = {n["metadata"]["name"]: n["status"]["nodeInfo"] for n in get(cluster, "nodes")["items"]}
    assert {i["kubeletVersion"] for i in info.values()} == {VERSION}
    assert {i["containerRuntimeVersion"] for i in info.values()} == {f"containerd://test-double-{VERSION}"}
    assert json.loads(kubectl(cluster, "version -o json"))["serverVersion"]["gitVersion"] == VERSION


def test_a_deployment_spreads_its_pods_kept_in_etcd(cluster):
    out = apply_workload(cluster, min_available=2)
    assert "deployment.apps/web created" in out and "poddisruptionbudget.policy/web created" in out, out
    placed = running_web(cluster)
    assert len(set(placed.values())) == 2, f"the two pods share a node: {placed}"
    # Pod -> ReplicaSet -> Deployment, each a controller reference, as a real Deployment's pods have.
    (rs,) = get(cluster, "replicasets")["items"]
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    for pod in web_pods(cluster).values():
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "ReplicaSet", rs["metadata"]["name"], rs["metadata"]["uid"], True)
        assert pod["metadata"]["name"].startswith(rs["metadata"]["name"] + "-") and pod["metadata"]["uid"]
        assert pod["status"]["phase"] == "Running"
    # kubectl drain's own query: every namespace, one node's pods.
    node = sorted(placed.values())[0]
    on_node = get(cluster, f"pods --all-namespaces --field-selector spec.nodeName={node}")["items"]
    assert [p["metadata"]["name"] for p in on_node] == [p for p, n in placed.items() if n == node]
    # The objects are in the real etcd, under Kubernetes' own keys.
    keys = cluster.sh("s1", "python3 - <<'EOF'\n" + ETCD_KEYS + "EOF").split()
    assert {f"/registry/pods/default/{p}" for p in placed} <= set(keys), keys
    assert {"/registry/deployments/default/web", "/registry/poddisruptionbudgets/default/web",
            f"/registry/replicasets/default/{rs['metadata']['name']}"} <= set(keys), keys


def test_a_drain_waits_for_the_budget_then_the_pod_moves(cluster):
    placed = running_web(cluster)
    victim = sorted(placed.values())[0]
    (pod,) = [p for p, n in placed.items() if n == victim]
    # minAvailable 2 of 2: the eviction is refused (429), kubectl retries every 5 s and fails at its timeout.
    out = kubectl(cluster, f"{DRAIN} {victim} --timeout=8s", check=False)
    assert out.endswith("rc=1"), out
    assert f"node/{victim} cordoned" in out, out
    assert f'error when evicting pods/"{pod}" -n "default" (will retry after 5s): {BUDGET_REFUSAL}' in out, out
    assert "global timeout reached: 8s" in out, out
    assert get(cluster, f"node {victim}")["spec"]["unschedulable"] is True
    assert running_web(cluster) == placed
    # The refusal names the budget in its Status, as Kubernetes' does; kubectl get pdb says the same.
    refusal = json.loads(cluster.sh("s1", f"python3 - {shlex.quote(pod)} <<'EOF'\n{EVICT}EOF"))
    assert (refusal["code"], refusal["reason"], refusal["message"]) == (429, "TooManyRequests", BUDGET_REFUSAL)
    assert refusal["details"]["causes"] == [{"reason": "DisruptionBudget",
                                            "message": "The disruption budget web needs 2 healthy pods and has 2 "
                                                       "currently"}], refusal
    status = get(cluster, "pdb web")["status"]
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (2, 2, 0)
    # A drain waiting on the budget proceeds once the budget is relaxed: the pod moves to the node left.
    drain = {}
    waiting = threading.Thread(target=lambda: drain.update(out=kubectl(cluster, f"{DRAIN} {victim} --timeout=60s",
                                                                       check=False)))
    waiting.start()
    try:
        time.sleep(2)
        assert "poddisruptionbudget.policy/web configured" in apply_workload(cluster, min_available=1)
    finally:
        waiting.join(90)
    out = drain["out"]
    assert out.endswith("rc=0"), out
    assert "(will retry after 5s)" in out and f"pod/{pod} evicted" in out and f"node/{victim} drained" in out, out
    moved = running_web(cluster)
    assert victim not in moved.values() and pod not in moved, moved
    assert set(moved.values()) == set(NODES) - {victim}, f"the pods do not spread over the two nodes left: {moved}"
    assert table(cluster, f"node {victim}")[0]["STATUS"] == "Ready,SchedulingDisabled"


def test_uncordon(cluster):
    victim = next(n["metadata"]["name"] for n in get(cluster, "nodes")["items"] if n["spec"].get("unschedulable"))
    assert kubectl(cluster, f"uncordon {victim}") == f"node/{victim} uncordoned"
    assert "unschedulable" not in get(cluster, f"node {victim}")["spec"]
    assert {row["STATUS"] for row in table(cluster, "nodes")} == {"Ready"}


def test_a_deleted_node_loses_its_pods_and_stays_deleted_until_its_kubelet_restarts(cluster):
    placed = running_web(cluster)
    agent = sorted(n for n in placed.values() if n in AGENTS)[0]
    assert kubectl(cluster, f"delete node {agent}") == f'node "{agent}" deleted'
    moved = running_web(cluster)
    assert agent not in moved.values(), moved
    assert not get(cluster, f"pods -A --field-selector spec.nodeName={agent}")["items"]
    # The agent still runs, yet its node is not registered again: a kubelet registers once, when it starts.
    wait_for(lambda: "is not registered (deleted)" in cluster.sh(agent, "journalctl -u rke2-agent --no-pager"),
             f"{agent}'s rke2 did not post its status", seconds=15)
    assert agent not in {n["metadata"]["name"] for n in get(cluster, "nodes")["items"]}
    cluster.sh(agent, "systemctl restart rke2-agent")
    assert sorted(n["metadata"]["name"] for n in get(cluster, "nodes")["items"]) == NODES


def test_scale_and_delete_a_deployment(cluster):
    assert kubectl(cluster, "scale deployment web --replicas=3") == "deployment.apps/web scaled"
    assert sorted(running_web(cluster, count=3).values()) == NODES
    assert table(cluster, "deployment web")[0]["READY"] == "3/3"
    # Deleting the deployment leaves its replica set and pods to the garbage collector, as Kubernetes does.
    assert kubectl(cluster, "delete deployment web") == 'deployment.apps "web" deleted'
    wait_for(lambda: not web_pods(cluster) and not get(cluster, "replicasets")["items"],
             "the deployment's replica set and pods were not collected")
    status = get(cluster, "pdb web")["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (0, 0)

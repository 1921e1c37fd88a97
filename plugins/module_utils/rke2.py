# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the RKE2 modules share: RKE2's on-host paths, etcd through its gRPC gateway, kubectl, the quorum
arithmetic, node states in the platform's words, and what a drain evicts and why a pod is still left.

etcd is read the way it is on any RKE2 server, with no etcdctl on the host (RKE2 runs etcd in a static pod): the
gateway that etcd 3.5 serves on its client port (JSON over HTTPS, ``/v3/cluster/member/list`` and friends),
authenticated with the client certificate RKE2 keeps under ``server/tls/etcd``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from urllib.error import HTTPError, URLError

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url

DATA_DIR = "/var/lib/rancher/rke2"
ETCD_TLS = DATA_DIR + "/server/tls/etcd"
KUBECTL = DATA_DIR + "/bin/kubectl"
KUBECONFIG = "/etc/rancher/rke2/rke2.yaml"
ETCD_ENDPOINT = "https://127.0.0.1:2379"

# Options every module that reads etcd takes (RKE2's own paths by default).
ETCD_ARGUMENT_SPEC = dict(
    endpoint=dict(type="str", default=ETCD_ENDPOINT),
    ca_cert=dict(type="path", default=ETCD_TLS + "/server-ca.crt"),
    client_cert=dict(type="path", default=ETCD_TLS + "/server-client.crt"),
    client_key=dict(type="path", default=ETCD_TLS + "/server-client.key"),
    timeout=dict(type="int", default=5),
)
KUBE_ARGUMENT_SPEC = dict(
    kubectl=dict(type="path", default=KUBECTL),
    kubeconfig=dict(type="path", default=KUBECONFIG),
)

# RKE2 names a server's etcd member after its node plus "-" and 8 hex digits.
_MEMBER_SUFFIX = re.compile(r"-[0-9a-f]{8}$")


class Rke2Error(Exception):
    """A read or change failed; str() is one line fit for fail_json."""


def node_of_member(member_name):
    """The node name an etcd member stands for (RKE2's member names are <node>-<8 hex>)."""
    return _MEMBER_SUFFIX.sub("", member_name or "")


def quorum_needed(voters):
    """etcd's quorum: a majority of the voting members."""
    return voters // 2 + 1


def removal_problem(members, name):
    """Why removing member ``name`` would lose quorum, or None when the remaining members keep it.

    ``members`` are member dicts (``name``, ``healthy``, ``learner``). A learner does not vote: removing one never
    touches quorum. Otherwise the remaining voters must still hold a majority of healthy members."""
    voters = [m for m in members if not m.get("learner")]
    leaving = [m for m in members if m["name"] == name]
    if leaving and leaving[0].get("learner"):
        return None
    remaining = [m for m in voters if m["name"] != name]
    if not remaining:
        return ("removing etcd member %s would leave no member: decommission the cluster instead" % name)
    healthy = len([m for m in remaining if m.get("healthy")])
    needed = quorum_needed(len(remaining))
    if healthy < needed:
        return ("removing etcd member %s would lose quorum: %d of the %d remaining voting members are healthy, "
                "and %d members need %d (a majority) to keep quorum"
                % (name, healthy, len(remaining), len(remaining), needed))
    return None


def quorum_summary(members):
    voters = [m for m in members if not m.get("learner")]
    healthy = len([m for m in voters if m.get("healthy")])
    needed = quorum_needed(len(voters)) if voters else 0
    return {"voters": len(voters), "healthy": healthy, "needed": needed,
            "has_quorum": bool(voters) and healthy >= needed, "can_lose": max(0, healthy - needed)}


class Etcd:
    """etcd's v3 gateway (JSON over HTTPS with the client certificate)."""

    def __init__(self, endpoint, ca_cert, client_cert, client_key, timeout):
        self.endpoint = endpoint.rstrip("/")
        if not self.endpoint.startswith(("https://", "http://")):
            raise Rke2Error("etcd endpoint %s is not an http(s) URL" % endpoint)
        self.timeout = timeout
        self.tls = dict(ca_path=ca_cert, client_cert=client_cert, client_key=client_key)

    @classmethod
    def from_params(cls, params):
        return cls(params["endpoint"], params["ca_cert"], params["client_cert"], params["client_key"],
                   params["timeout"])

    def call(self, path, body, endpoint=None):
        url = (endpoint or self.endpoint).rstrip("/") + path
        if not url.startswith(("https://", "http://")):
            raise Rke2Error("etcd member URL %s is not an http(s) URL" % url)
        try:
            response = open_url(url, data=json.dumps(body), method="POST", timeout=self.timeout,
                                headers={"Content-Type": "application/json"}, validate_certs=True, **self.tls)
            return json.loads(response.read() or b"{}")
        except HTTPError as error:  # the gateway's own refusal: {"error", "code", "message"}
            try:
                said = json.loads(error.read() or b"{}")
            except ValueError:
                said = {}
            reason = said.get("message") or said.get("error") or error.reason
            raise Rke2Error("etcd refused %s: %s" % (path, reason)) from None
        except (URLError, OSError, ValueError, UrlsConnectionError) as error:
            said = getattr(error, "reason", error)
            raise Rke2Error("etcd at %s does not answer %s: %s" % (endpoint or self.endpoint, path, said)) from None

    def members(self):
        """Every member with its health: each one's own status endpoint answers, and knows a leader."""
        listed = self.call("/v3/cluster/member/list", {"linearizable": False}).get("members", [])
        members = []
        for raw in listed:
            member = {
                "id": str(raw.get("ID", "")),
                "name": raw.get("name", ""),
                "node": node_of_member(raw.get("name", "")),
                "peer_urls": raw.get("peerURLs", []),
                "client_urls": raw.get("clientURLs", []),
                "learner": bool(raw.get("isLearner", False)),
                "started": bool(raw.get("name")),
                "healthy": False,
                "leader": False,
                "error": None,
            }
            if not member["client_urls"]:
                member["error"] = "not started (added, never joined)"
            for url in member["client_urls"][:1]:
                try:
                    status = self.call("/v3/maintenance/status", {}, endpoint=url)
                    leader = str(status.get("leader", "0"))
                    member["healthy"] = leader not in ("", "0") and not status.get("errors")
                    member["leader"] = leader == member["id"]
                    if not member["healthy"]:
                        member["error"] = "; ".join(status.get("errors") or ["no leader"])
                except Rke2Error as error:
                    member["error"] = str(error)
            members.append(member)
        return members

    def add(self, peer_url, learner=False):
        return self.call("/v3/cluster/member/add", {"peerURLs": [peer_url], "isLearner": learner})

    def remove(self, member_id):
        return self.call("/v3/cluster/member/remove", {"ID": member_id})


class Kubectl:
    """The host's kubectl (RKE2 puts one in its data dir) with RKE2's admin kubeconfig."""

    def __init__(self, module, kubectl=KUBECTL, kubeconfig=KUBECONFIG):
        self.module = module
        self.kubectl = kubectl
        self.kubeconfig = kubeconfig

    def run(self, args, check=True):
        cmd = [self.kubectl, "--kubeconfig", self.kubeconfig, "--request-timeout=10s"] + list(args)
        rc, out, err = self.module.run_command(cmd, check_rc=False, environ_update={"LC_ALL": "C"})
        if check and rc != 0:
            raise Rke2Error("kubectl %s failed (rc=%s): %s" % (" ".join(args), rc, " ".join((err or out).split())))
        return rc, out, err

    def get(self, args):
        out = self.run(["get"] + list(args) + ["-o", "json"])[1]
        try:
            return json.loads(out) if out.strip() else None
        except ValueError:
            raise Rke2Error("kubectl get %s gave no JSON: %s" % (" ".join(args), " ".join(out.split())[:200])) from None

    def nodes(self):
        return self.get(["nodes"]).get("items", [])

    def node(self, name):
        """The Node object, or None when the API does not know it."""
        return self.get(["node", name, "--ignore-not-found"])

    def pods_on(self, node):
        return self.get(["pods", "--all-namespaces", "--field-selector", "spec.nodeName=" + node]).get("items", [])

    def budgets(self):
        return self.get(["poddisruptionbudgets", "--all-namespaces"]).get("items", [])


def node_summary(node):
    """A Node object as the modules return it."""
    meta, spec, status = node.get("metadata", {}), node.get("spec", {}), node.get("status", {})
    ready = [c for c in status.get("conditions", []) if c.get("type") == "Ready"]
    labels = meta.get("labels", {})
    addresses = dict((a.get("type"), a.get("address")) for a in status.get("addresses", []))
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    return {
        "name": meta.get("name"),
        "ready": bool(ready) and ready[0].get("status") == "True",
        "ready_reason": ready[0].get("reason") if ready else "NoReadyCondition",
        "ready_message": ready[0].get("message") if ready else "the node reports no Ready condition",
        "unschedulable": bool(spec.get("unschedulable")),
        "roles": roles,
        "internal_ip": addresses.get("InternalIP"),
        "kubelet_version": status.get("nodeInfo", {}).get("kubeletVersion"),
        "labels": labels,
        "taints": spec.get("taints", []),
    }


def node_state(summary, pods_left=0):
    """The member's state in the platform's words: failed when not Ready; cordoned nodes are draining while
    evictable pods remain, drained after; active otherwise."""
    if summary is None or not summary["ready"]:
        return "failed"
    if summary["unschedulable"]:
        return "draining" if pods_left else "drained"
    return "active"


# What kubectl drain leaves alone and what it needs --force for (k8s.io/kubectl/pkg/drain/filters.go).
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED_PHASES = ("Succeeded", "Failed")
# kubectl drain's words when its --timeout ran out, while evicting or while waiting for evicted pods to go.
DRAIN_TIMEOUT_WORDS = "global timeout reached"
_EVICTION_RETRY = re.compile(r'error when evicting pods/"([^"]+)" -n "([^"]+)" \(will retry after [^)]*\): (.*)')


def pod_name(pod):
    meta = pod.get("metadata", {})
    return "%s/%s" % (meta.get("namespace", "default"), meta.get("name"))


def controller_of(pod):
    refs = [r for r in pod.get("metadata", {}).get("ownerReferences", []) if r.get("controller")]
    return refs[0] if refs else None


def drain_pods(pods):
    """The pods ``kubectl drain --ignore-daemonsets`` evicts: all but a running DaemonSet's (the DaemonSet would
    put it back at once) and the mirrors of static pods (the kubelet owns those), sorted by name."""
    evicted = []
    for pod in pods:
        finished = pod.get("status", {}).get("phase") in FINISHED_PHASES
        controller = controller_of(pod)
        if controller and controller.get("kind") == "DaemonSet" and not finished:
            continue
        if MIRROR_POD_ANNOTATION in pod.get("metadata", {}).get("annotations", {}):
            continue
        evicted.append(pod)
    return sorted(evicted, key=pod_name)


def unmanaged(pod):
    """A running pod no controller would recreate elsewhere: kubectl drain refuses it without --force."""
    return controller_of(pod) is None and pod.get("status", {}).get("phase") not in FINISHED_PHASES


def selects(selector, labels):
    """Whether a LabelSelector selects ``labels`` (a null selector selects nothing, an empty one everything)."""
    if selector is None:
        return False
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def budget_summary(budget):
    meta, status = budget.get("metadata", {}), budget.get("status", {})
    return {"name": "%s/%s" % (meta.get("namespace", "default"), meta.get("name")),
            "disruptions_allowed": status.get("disruptionsAllowed", 0),
            "current_healthy": status.get("currentHealthy", 0),
            "desired_healthy": status.get("desiredHealthy", 0)}


def blocking_budget(pod, budgets):
    """The PodDisruptionBudget that refuses the pod's eviction now (it selects the pod and allows no disruption),
    or None."""
    meta = pod.get("metadata", {})
    for budget in budgets:
        if (budget.get("metadata", {}).get("namespace") == meta.get("namespace")
                and selects(budget.get("spec", {}).get("selector"), meta.get("labels", {}))
                and budget.get("status", {}).get("disruptionsAllowed", 0) < 1):
            return budget
    return None


def eviction_refusals(kubectl_output):
    """{ns/name: the API's last refusal} from kubectl drain's retry lines."""
    said = {}
    for line in (kubectl_output or "").splitlines():
        match = _EVICTION_RETRY.search(line)
        if match:
            said["%s/%s" % (match.group(2), match.group(1))] = match.group(3).strip()
    return said


def why_left(pods, budgets, kubectl_output=""):
    """({ns/name: why it is still on the node}, [the budgets that block some of them]) for pods a drain left."""
    said = eviction_refusals(kubectl_output)
    reasons, blocking = {}, []
    for pod in pods:
        name = pod_name(pod)
        budget = blocking_budget(pod, budgets)
        if budget is not None:
            reasons[name] = "blocked by PodDisruptionBudget %s" % budget["metadata"]["name"]
            if budget_summary(budget) not in blocking:
                blocking.append(budget_summary(budget))
        elif name in said:
            reasons[name] = "eviction refused: %s" % said[name]
        elif pod.get("metadata", {}).get("deletionTimestamp"):
            reasons[name] = "evicted, still terminating"
        else:
            reasons[name] = "not evicted yet"
    return reasons, blocking


def pods_left_text(reasons, limit=None):
    """'ns/a: why, ns/b: why' (with limit, the first ``limit`` and how many more)."""
    names = sorted(reasons)
    shown = names if limit is None else names[:limit]
    text = ", ".join("%s: %s" % (n, reasons[n]) for n in shown)
    return text + (", and %d more" % (len(names) - len(shown)) if len(names) > len(shown) else "")


def drain_timed_out_message(node, timeout, reasons, budgets):
    """Why a drain failed at its timeout, naming the pods still on the node and the budgets that hold them; shared
    by the rke2_node module and its action plugin."""
    message = "node %s not drained after %ss: %d pod(s) left (%s)" % (
        node, timeout, len(reasons), pods_left_text(reasons))
    for budget in budgets:
        message += ("; PodDisruptionBudget %s allows %d disruption(s): %d pod(s) healthy, %d needed"
                    % (budget["name"], budget["disruptions_allowed"], budget["current_healthy"],
                       budget["desired_healthy"]))
    return message

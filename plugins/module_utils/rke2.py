# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the RKE2 modules share: RKE2's on-host paths, etcd through its gRPC gateway, kubectl, the quorum
arithmetic and node states in the platform's words.

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

    def nodes(self):
        return json.loads(self.run(["get", "nodes", "-o", "json"])[1]).get("items", [])


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

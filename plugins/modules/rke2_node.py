#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: rke2_node
short_description: Cordon, drain, uncordon or delete a node of an RKE2 cluster
version_added: "0.1.0"
description:
  - Sets a node's state through the Kubernetes API with the kubectl RKE2 unpacks and its admin kubeconfig; run it
    on a live server.
  - O(state=schedulable) uncordons the node; O(state=cordoned) cordons it and evicts nothing.
  - O(state=drained) cordons the node, then evicts every pod on it but a DaemonSet's and the mirrors of static
    pods, with C(kubectl drain --ignore-daemonsets --delete-emptydir-data). Pods go by evictions, never by plain
    deletions, so PodDisruptionBudgets are honoured; a budget that allows no disruption keeps its pods on the node
    until it does, or until O(timeout), when the module fails naming the pods still on the node and the budgets
    that hold them. Pods that declare no controller would be lost for good, so the module refuses them, changing
    nothing, unless O(force=true).
  - O(state=absent) deletes the Node object (C(kubectl delete node)). It does not drain; cordon and drain first.
  - A node already in the requested state is left alone (a cordoned node without pods left to evict is drained);
    a node that is not there is already absent.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description: The node's name (a DNS subdomain, as Kubernetes requires).
    type: str
    required: true
  state:
    description:
      - V(schedulable) uncordons the node, V(cordoned) cordons it, V(drained) cordons it and evicts its pods,
        V(absent) deletes the Node object.
      - Omitted, the module only reads the node.
    type: str
    choices: [schedulable, cordoned, drained, absent]
  timeout:
    description:
      - With O(state=drained), the seconds a drain may wait for its evictions (PodDisruptionBudgets that allow no
        disruption, pods still terminating) before the module fails. At least 1.
    type: int
    default: 600
  progress_interval:
    description:
      - With O(state=drained), the task prints a line every this many seconds while it waits, naming the pods still
        on the node and why. The module's action plugin does it by draining in steps of this length.
      - V(0) drains in one step, without progress lines.
    type: int
    default: 30
  force:
    description:
      - With O(state=drained), evict pods that declare no controller too (C(kubectl drain --force)). They are not
        recreated anywhere.
    type: bool
    default: false
  missing_ok:
    description:
      - When the node does not exist, return RV(node.exists=false) instead of failing. O(state=absent) never fails
        for a missing node.
    type: bool
    default: false
notes:
  - In check mode nothing is changed; RV(evicted) names the pods a drain would evict, a warning names those a
    PodDisruptionBudget would hold now, and RV(node), RV(pods_left) and RV(state) describe the node as it is.
  - The diff shows the node's C(exists), C(unschedulable) and C(pods) (the pods a drain evicts) before and after.
  - "A progress line while a drain waits (O(progress_interval)) reads, for host s1 and node a1:
    [s1] rke2_node a1: still draining, 1 pod(s) left (default/web-5d9f-abcde: blocked by PodDisruptionBudget web);
    waited 30s of 600s"
  - A node that is not Ready cannot confirm that its pods stopped, so a drain of a dead node waits until O(timeout);
    delete a dead node with O(state=absent) instead.
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
  - gpuaas.apps.rke2.kubectl
"""

EXAMPLES = r"""
- name: Drain an agent, waiting up to 10 minutes for PodDisruptionBudgets
  gpuaas.apps.rke2_node:
    name: a1
    state: drained
    timeout: 600

- name: Remove its Node object (after the drain)
  gpuaas.apps.rke2_node:
    name: a1
    state: absent

- name: Put a node back in service
  gpuaas.apps.rke2_node:
    name: a1
    state: schedulable

- name: Cordon a node that may be gone already
  gpuaas.apps.rke2_node:
    name: a1
    state: cordoned
    missing_ok: true
"""

RETURN = r"""
node:
  description: The node after the task (in check mode, as it is); only C(name) and C(exists) when there is none.
  returned: always
  type: dict
  contains:
    name:
      description: The node's name.
      type: str
    exists:
      description: Whether the API knows the node.
      type: bool
    unschedulable:
      description: Whether it is cordoned.
      type: bool
    ready:
      description: Whether its Ready condition is True.
      type: bool
    roles:
      description: Its roles, from its C(node-role.kubernetes.io/*) labels.
      type: list
      elements: str
    taints:
      description: Its taints.
      type: list
      elements: dict
  sample: {name: a1, exists: true, unschedulable: true, ready: true, roles: [], taints: [],
           ready_reason: KubeletReady, ready_message: kubelet is posting ready status, internal_ip: 10.0.0.21,
           kubelet_version: v1.32.3, labels: {}}
state:
  description: The node's state after the task in the platform's words, V(active), V(draining) (cordoned, pods
    left to evict), V(drained), V(failed) (not Ready), or V(absent) (no such node).
  returned: always
  type: str
  sample: drained
evicted:
  description: The pods (C(namespace/name)) this task evicted; in check mode, those a drain would evict.
  returned: always
  type: list
  elements: str
  sample: [default/web-5d9f-abcde]
pods_left:
  description: The pods (C(namespace/name)) on the node that a drain evicts and that are still there.
  returned: always
  type: list
  elements: str
  sample: []
pods_left_reasons:
  description: For each pod still left after a drain, why.
  returned: when a drain failed or timed out
  type: dict
  sample: {default/web-5d9f-abcde: blocked by PodDisruptionBudget web}
blocking_budgets:
  description: The PodDisruptionBudgets that allow no disruption and hold pods of RV(pods_left_reasons).
  returned: when a drain failed or timed out
  type: list
  elements: dict
  sample: [{name: default/web, disruptions_allowed: 0, current_healthy: 1, desired_healthy: 1}]
timed_out:
  description: Set (true) when the drain ran out of O(timeout).
  returned: when a drain timed out
  type: bool
  sample: true
"""

import re  # noqa: E402 - Ansible modules import after their docs

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.rke2 import (  # noqa: E402
    DRAIN_TIMEOUT_WORDS,
    KUBE_ARGUMENT_SPEC,
    Kubectl,
    Rke2Error,
    blocking_budget,
    drain_pods,
    drain_timed_out_message,
    node_state,
    node_summary,
    pod_name,
    pods_left_text,
    unmanaged,
    why_left,
)

# A Node's name is a DNS subdomain (RFC 1123); checking it also keeps a name like "--all" from being an option.
NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def names(pods):
    return [pod_name(p) for p in pods]


def diff_view(summary, pods):
    return {"exists": summary is not None, "unschedulable": bool(summary and summary["unschedulable"]),
            "pods": names(pods)}


class Node:
    """The node as the API shows it: its summary (None when missing) and the pods a drain evicts."""

    def __init__(self, kubectl, name):
        self.kubectl = kubectl
        self.name = name
        self.summary, self.pods = None, []
        self.read()

    def read(self, pods=True):
        found = self.kubectl.node(self.name)
        self.summary = node_summary(found) if found else None
        if pods:
            self.pods = drain_pods(self.kubectl.pods_on(self.name)) if found else []
        return self

    def result(self, **extra):
        if self.summary is None:
            node, state = {"name": self.name, "exists": False}, "absent"
        else:
            node, state = dict(self.summary, exists=True), node_state(self.summary, len(self.pods))
        result = dict(node=node, state=state, evicted=[], pods_left=names(self.pods))
        result.update(extra)
        return result


def set_cordoned(module, kubectl, node, cordoned):
    before = diff_view(node.summary, node.pods)
    if node.summary["unschedulable"] == cordoned:
        module.exit_json(**node.result(changed=False, diff=dict(before=before, after=before)))
    after = dict(before, unschedulable=cordoned)
    if not module.check_mode:
        kubectl.run(["cordon" if cordoned else "uncordon", node.name])
        node.read(pods=False)  # a cordon moves no pod
        after = diff_view(node.summary, node.pods)
    module.exit_json(**node.result(changed=True, diff=dict(before=before, after=after)))


def delete(module, kubectl, node):
    before = diff_view(node.summary, node.pods)
    if not module.check_mode:
        kubectl.run(["delete", "node", node.name])
        node.read()
    diff = dict(before=before, after=diff_view(None, []))
    module.exit_json(**node.result(changed=True, diff=diff))


def drain(module, kubectl, node):
    params = module.params
    before = diff_view(node.summary, node.pods)
    if node.summary["unschedulable"] and not node.pods:
        module.exit_json(**node.result(changed=False, diff=dict(before=before, after=before)))
    lost = [p for p in node.pods if unmanaged(p)]
    if lost and not params["force"]:
        module.fail_json(msg="node %s runs pods that declare no controller, which a drain would delete for good: %s; "
                             "force=true evicts them anyway" % (node.name, ", ".join(names(lost))),
                         **node.result(changed=False))
    diff = dict(before=before, after=diff_view(dict(node.summary, unschedulable=True), []))
    if module.check_mode:
        budgets = kubectl.budgets() if node.pods else []
        for pod in node.pods:
            budget = blocking_budget(pod, budgets)
            if budget is not None:
                module.warn("%s would wait: PodDisruptionBudget %s allows no disruption now"
                            % (pod_name(pod), budget["metadata"]["name"]))
        module.exit_json(**node.result(changed=True, evicted=names(node.pods), diff=diff))

    on_node = dict((p["metadata"].get("uid"), pod_name(p)) for p in node.pods)
    args = ["drain", node.name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=%ds" % params["timeout"]]
    if params["force"]:
        args.append("--force")
    rc, out, err = kubectl.run(args, check=False)
    node.read()
    still = set(p["metadata"].get("uid") for p in node.pods)
    evicted = sorted(name for uid, name in on_node.items() if uid not in still)
    diff["after"] = diff_view(node.summary, node.pods)
    result = node.result(changed=not before["unschedulable"] or bool(evicted), evicted=evicted, diff=diff)
    if rc == 0 and not node.pods:
        module.exit_json(**result)
    kubectl_said = "%s\n%s" % (out, err)
    reasons, budgets = why_left(node.pods, kubectl.budgets() if node.pods else [], kubectl_said)
    result.update(pods_left_reasons=reasons, blocking_budgets=budgets)
    if rc != 0 and node.pods and DRAIN_TIMEOUT_WORDS in kubectl_said:
        module.fail_json(msg=drain_timed_out_message(node.name, params["timeout"], reasons, budgets),
                         timed_out=True, **result)
    # kubectl drain ends with its verdict ("error: ..."), after a line per eviction attempt.
    verdicts = [line[len("error: "):] for line in (err or "").splitlines() if line.startswith("error: ")]
    words = verdicts[-1] if verdicts else " ".join((err or out).split()) or "no output"
    if rc == 0:
        module.fail_json(msg="kubectl drain %s succeeded, but %d pod(s) are on the node again (%s)"
                             % (node.name, len(reasons), pods_left_text(reasons)), **result)
    module.fail_json(msg="kubectl drain %s failed (rc=%s): %s%s" % (
        node.name, rc, words, "; %d pod(s) left (%s)" % (len(reasons), pods_left_text(reasons)) if reasons else ""),
        **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["schedulable", "cordoned", "drained", "absent"]),
            timeout=dict(type="int", default=600),
            progress_interval=dict(type="int", default=30),
            force=dict(type="bool", default=False),
            missing_ok=dict(type="bool", default=False),
            **KUBE_ARGUMENT_SPEC
        ),
        supports_check_mode=True,
    )
    params = module.params
    name, state = params["name"], params["state"]
    if len(name) > 253 or not NODE_NAME.match(name):
        module.fail_json(msg="name %r is not a node name (lower-case letters, digits, '-' and '.', as Kubernetes "
                             "names nodes)" % name)
    if params["timeout"] < 1 or params["progress_interval"] < 0:
        module.fail_json(msg="timeout must be at least 1 and progress_interval at least 0")
    kubectl = Kubectl(module, params["kubectl"], params["kubeconfig"])
    try:
        node = Node(kubectl, name)
        if node.summary is None:
            if state == "absent" or params["missing_ok"]:
                module.exit_json(**node.result(changed=False))
            module.fail_json(msg="node %s does not exist in the cluster (the API does not know it); use "
                                 "missing_ok=true if that is fine" % name, **node.result())
        if state is None:
            module.exit_json(**node.result(changed=False))
        if state == "absent":
            delete(module, kubectl, node)
        elif state == "drained":
            drain(module, kubectl, node)
        else:
            set_cordoned(module, kubectl, node, state == "cordoned")
    except Rke2Error as error:
        module.fail_json(msg=str(error))


if __name__ == "__main__":
    main()

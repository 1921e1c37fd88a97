#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: rke2_info
short_description: Read an RKE2 cluster's nodes and etcd health, and judge its members in the platform's words
version_added: "0.1.0"
description:
  - With O(view=cluster), on an RKE2 server, reads the nodes through the Kubernetes API (the host's kubectl with
    RKE2's admin kubeconfig) and the etcd membership and health (as M(gpuaas.apps.rke2_etcd_member) reads them).
    Changes nothing.
  - With O(members), returns RV(member_states), each member's state in the platform's words, and
    RV(member_details), the runtime detail the platform stores and shows. A server whose etcd member is
    unhealthy is failed, whatever its node says.
  - etcd is read only on a host that has its client certificates (where O(ca_cert) exists), that is a server.
  - When the API does not answer (etcd lost quorum, or no server runs), it fails with one line that says so; the
    platform reads that as a control plane that does not answer.
  - With O(view=self) it judges only the member on the host it runs on (O(node)), from that host alone, failed
    when no C(rke2) process runs there (read from C(/proc)), active otherwise. The API notices a dead node only
    after Kubernetes' node monitor grace period (40 s by default).
  - O(wait) polls, inside this one module run, until every member of O(members) is V(active) (or, with
    O(wait_for=ready), anything but V(failed), so that a cordoned node that is Ready counts) or the time is up.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  members:
    description:
      - Inventory host names of the members to judge; a comma-separated string is accepted too. A member's node is
        the one named like the host up to its first dot (how the roles name nodes by default).
    type: list
    elements: str
  view:
    description: V(cluster) judges every member from the API and etcd; V(self) only O(node), from this host.
    type: str
    choices: [cluster, self]
    default: cluster
  node:
    description: The member on this host, as O(members) names it. Required with O(view=self).
    type: str
  wait:
    description: Seconds to wait, polling, until every member of O(members) is active (0 reads once).
    type: int
    default: 0
  wait_for:
    description:
      - What O(wait) waits for. V(active) every member active; V(ready) every member Ready (and, for a server, its
        etcd member healthy), cordoned or not, as after the restart of a node an upgrade drained.
    type: str
    choices: [active, ready]
    default: active
  version:
    description:
      - With O(wait), also wait until the node of every member of O(members) reports this kubelet version (RKE2's
        version, such as V(v1.32.5+rke2r1)). After an upgrade's restart the node's Ready condition from before the
        restart may still read True for a while; the version it reports is the restarted kubelet's.
    type: str
extends_documentation_fragment:
  - gpuaas.apps.attributes.read_only
  - gpuaas.apps.rke2.kubectl
  - gpuaas.apps.rke2.etcd
"""

EXAMPLES = r"""
- name: Read the cluster
  gpuaas.apps.rke2_info:
  register: rke2

- name: Wait until the joined nodes are Ready
  gpuaas.apps.rke2_info:
    members: [s1, s2, a1]
    wait: 120

# As the platform's health check runs it: a server judges every member, an agent only itself.
- name: Judge the members
  gpuaas.apps.rke2_info:
    view: "{{ 'cluster' if 'rke2_servers' in group_names else 'self' }}"
    node: "{{ inventory_hostname }}"
    members: [s1, s2, a1]
"""

RETURN = r"""
view:
  description: The O(view) the members were judged from.
  returned: always
  type: str
  sample: cluster
nodes:
  description: The nodes the API knows.
  returned: with O(view=cluster)
  type: list
  elements: dict
  sample:
    - {name: s1, ready: true, ready_reason: KubeletReady, ready_message: kubelet is posting ready status,
       unschedulable: false, roles: [control-plane, etcd, master], internal_ip: 10.0.0.11,
       kubelet_version: v1.32.3, labels: {}, taints: []}
etcd:
  description: The etcd members and quorum arithmetic, as M(gpuaas.apps.rke2_etcd_member) returns them; null on a
    host without etcd certificates (an agent).
  returned: with O(view=cluster)
  type: dict
member_states:
  description:
    - Each member this host judges and its state, one of V(active), V(draining), V(drained), V(failed).
    - V(failed) for a node that is not Ready or that the API does not know, and for a server whose etcd member is
      unhealthy or missing; V(drained) for a cordoned node; V(active) otherwise.
  returned: when O(members) is given, or with O(view=self)
  type: dict
  sample: {s1: active, a1: drained}
member_details:
  description:
    - For each member of RV(member_states), at most 16 scalar values, strings cut to 200 characters,
      C(view), C(reason) (why it is failed, else null), C(ready), C(unschedulable), C(roles), C(kubelet_version),
      C(internal_ip), and for servers C(etcd_member), C(etcd_healthy), C(etcd_leader); with O(view=self)
      C(rke2_running).
  returned: when RV(member_states) is
  type: dict
"""

import os  # noqa: E402 - Ansible modules import after their docs
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.rke2 import (  # noqa: E402
    ETCD_ARGUMENT_SPEC,
    KUBE_ARGUMENT_SPEC,
    Etcd,
    Kubectl,
    Rke2Error,
    node_state,
    node_summary,
    quorum_summary,
)

PROC_ROOT = "/proc"
DETAIL_MAX_CHARS = 200


def rke2_running(proc_root):
    for pid in os.listdir(proc_root):
        if pid.isdigit():
            try:
                with open(os.path.join(proc_root, pid, "comm")) as handle:
                    if handle.read().strip() == "rke2":
                        return True
            except (IOError, OSError):
                continue
    return False


def node_name_of(member):
    return member.split(".", 1)[0]


def _detail(value):
    if isinstance(value, str) and len(value) > DETAIL_MAX_CHARS:
        return value[:DETAIL_MAX_CHARS - 3] + "..."
    return value


def cluster_judgement(member, node, etcd_members):
    """(state, details) of one member from the API's node and, for a server, its etcd member."""
    name = node_name_of(member)
    if node is None:
        return "failed", {"view": "cluster", "reason": "node %s is not in the cluster (the API does not know it)"
                          % name}
    state = node_state(node)
    details = {"view": "cluster", "reason": None, "ready": node["ready"], "unschedulable": node["unschedulable"],
               "roles": ",".join(node["roles"]), "kubelet_version": node["kubelet_version"],
               "internal_ip": node["internal_ip"]}
    if state == "failed":
        details["reason"] = "node %s is not Ready (%s): %s" % (name, node["ready_reason"], node["ready_message"])
    if etcd_members is not None and "etcd" in node["roles"]:
        etcd = [m for m in etcd_members if m["node"] == name]
        details["etcd_member"] = etcd[0]["name"] if etcd else None
        details["etcd_healthy"] = bool(etcd) and etcd[0]["healthy"]
        details["etcd_leader"] = bool(etcd) and etcd[0]["leader"]
        if not details["etcd_healthy"]:
            state = "failed"
            details["reason"] = ("server %s has no etcd member" % name if not etcd
                                 else "etcd member %s is unhealthy: %s" % (etcd[0]["name"], etcd[0]["error"]))
    return state, details


def judge(members, nodes, etcd_members):
    by_name = dict((n["name"], n) for n in nodes)
    states, details = {}, {}
    for member in members:
        states[member], details[member] = cluster_judgement(member, by_name.get(node_name_of(member)), etcd_members)
    return states, dict((m, dict((k, _detail(v)) for k, v in d.items())) for m, d in details.items())


def read_cluster(module, params):
    kubectl = Kubectl(module, params["kubectl"], params["kubeconfig"])
    nodes = [node_summary(n) for n in kubectl.nodes()]
    etcd = None
    if os.path.exists(params["ca_cert"]):
        etcd_members = Etcd.from_params(params).members()
        etcd = {"members": etcd_members, "quorum": quorum_summary(etcd_members)}
    return nodes, etcd


def main():
    module = AnsibleModule(
        argument_spec=dict(
            members=dict(type="list", elements="str"),
            view=dict(type="str", choices=["cluster", "self"], default="cluster"),
            node=dict(type="str"),
            wait=dict(type="int", default=0),
            wait_for=dict(type="str", choices=["active", "ready"], default="active"),
            version=dict(type="str"),
            **dict(KUBE_ARGUMENT_SPEC, **ETCD_ARGUMENT_SPEC)
        ),
        required_if=[("view", "self", ["node"])],
        supports_check_mode=True,
    )
    params = module.params
    members = None if params["members"] is None else [m.strip() for m in params["members"] if m.strip()]
    if params["view"] == "self":
        node = params["node"].strip()
        running = rke2_running(PROC_ROOT)
        details = {"view": "self", "rke2_running": running,
                   "reason": None if running else "rke2 is not running on %s" % node}
        module.exit_json(changed=False, view="self", member_states={node: "active" if running else "failed"},
                         member_details={node: details})
    waited_for = ("active",) if params["wait_for"] == "active" else ("active", "draining", "drained")
    deadline = time.time() + params["wait"]
    while True:
        try:
            nodes, etcd = read_cluster(module, params)
            error = None
        except Rke2Error as failure:
            nodes, etcd, error = None, None, failure
        if error is None:
            states, details = judge(members or [], nodes, etcd and etcd["members"])
            waiting = not_yet(states, details, waited_for, params["version"])
            if not waiting or time.time() >= deadline:
                break
        elif time.time() >= deadline:
            module.fail_json(msg="the RKE2 control plane does not answer: %s" % " ".join(str(error).split()))
        time.sleep(2)
    result = dict(changed=False, view="cluster", nodes=nodes, etcd=etcd)
    if members is not None:
        result["member_states"], result["member_details"] = states, details
        if params["wait"] and waiting:
            module.fail_json(msg="members not %s after %ds: %s" % (params["wait_for"], params["wait"], ", ".join(
                "%s (%s)" % (m, why) for m, why in sorted(waiting.items()))), **result)
    module.exit_json(**result)


def not_yet(states, details, waited_for, version):
    """The members a wait is still waiting for, each with why."""
    waiting = {}
    for member, state in states.items():
        if state not in waited_for:
            waiting[member] = "%s: %s" % (state, details[member].get("reason"))
        elif version and details[member].get("kubelet_version") != version:
            waiting[member] = "runs %s, not %s" % (details[member].get("kubelet_version"), version)
    return waiting


if __name__ == "__main__":
    main()

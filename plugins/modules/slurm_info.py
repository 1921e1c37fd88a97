#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: slurm_info
short_description: Read a Slurm cluster's name, version, partitions and nodes as structured data
version_added: "0.1.0"
description:
  - Reads C(scontrol show config), C(scontrol show -o partition), C(scontrol show -o node) and C(squeue)
    and returns the cluster as structured data. Changes nothing.
  - With O(members), also returns RV(member_states), each member's state in the platform's words, so the
    control service maps no Slurm state itself, and RV(member_details), the runtime detail it stores and shows.
  - With O(view=self) it judges only the member on the host it runs on (O(node)), from that host alone.
    It is failed when C(slurmd) or C(munged) does not run there (read from C(/proc), no systemd needed), active
    otherwise. It does not call the controller, which notices a dead C(slurmd) only after C(SlurmdTimeout)
    (300 s by default).
  - Written for Slurm 22.05 (Debian 12) and 24.11 (Debian 13, whose nodes and jobs it reads as JSON); with
    O(view=cluster) run it where C(scontrol) reaches the controller.
    When the controller does not answer, it fails with one line that says so.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  slurm_conf:
    description:
      - Path of the slurm.conf the Slurm commands use (exported as E(SLURM_CONF)). Default is Slurm's own.
    type: path
  members:
    description:
      - Inventory host names of the members to report in RV(member_states), as the control service names
        members; a comma-separated string is accepted too.
      - A member's Slurm node is the one named like the host up to its first dot (how the roles name nodes
        by default).
    type: list
    elements: str
  view:
    description:
      - V(cluster) judges every member of O(members) from the controller's view (C(scontrol)); when O(node) is
        one of them (a worker placed on the controller's host), that member is also judged from this host's own
        daemons, and a failure there wins.
      - V(self) judges only O(node), from this host alone; the cluster is not read and only RV(view),
        RV(member_states) and RV(member_details) are returned.
    type: str
    choices: [cluster, self]
    default: cluster
  node:
    description:
      - The member on the host the module runs on, as O(members) names it (the platform passes the inventory
        host name). Required with O(view=self).
    type: str
extends_documentation_fragment:
  - gpuaas.apps.attributes.read_only
"""

EXAMPLES = r"""
- name: Read the cluster
  gpuaas.apps.slurm_info:
  register: slurm

- name: Fail when a worker is missing
  ansible.builtin.assert:
    that: "'gpu07' in (slurm.nodes | map(attribute='name'))"

- name: Read the members' states in the platform's words
  gpuaas.apps.slurm_info:
    members: [gpu07.example.org, gpu08.example.org]
  register: slurm

- name: Fail unless every member is active
  ansible.builtin.assert:
    that: slurm.member_states.values() | reject('eq', 'active') | list | length == 0

# As the platform's health check runs it on the controller and on every worker: the controller judges every
# member from slurmctld, each worker only itself, from its own daemons.
- name: Judge the members
  gpuaas.apps.slurm_info:
    view: "{{ 'cluster' if 'slurm_controller' in group_names else 'self' }}"
    node: "{{ inventory_hostname }}"
    members: [gpu07, gpu08]
  register: health
"""

RETURN = r"""
cluster:
  description: C(ClusterName).
  returned: with O(view=cluster)
  type: str
  sample: gpuaas-1234
slurm_version:
  description: Version of the controller's configuration (C(SLURM_VERSION)).
  returned: with O(view=cluster)
  type: str
  sample: 22.05.8
partitions:
  description: The partitions.
  returned: with O(view=cluster)
  type: list
  elements: dict
  contains:
    name:
      description: Partition name.
      type: str
    nodes:
      description: Its nodes, host list expanded.
      type: list
      elements: str
    state:
      description: C(UP), C(DOWN), C(DRAIN) or C(INACTIVE).
      type: str
    default:
      description: Whether jobs without a partition land here.
      type: bool
    max_time:
      description: C(MaxTime) as Slurm prints it (C(UNLIMITED), C(1-00:00:00), ...).
      type: str
    total_cpus:
      description: C(TotalCPUs).
      type: int
  sample:
    - {name: gpu, nodes: [gpu01, gpu02], state: UP, default: true, max_time: "1-00:00:00", total_cpus: 4}
nodes:
  description: The nodes.
  returned: with O(view=cluster)
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
    state:
      description: State string, such as C(IDLE), C(MIXED+DRAIN).
      type: str
    cpus:
      description: C(CPUTot).
      type: int
    real_memory:
      description: C(RealMemory) in MiB.
      type: int
    gres:
      description: C(Gres), empty when none.
      type: str
    features:
      description: C(AvailableFeatures).
      type: list
      elements: str
    reason:
      description: Reason text without Slurm's stamp; empty when none.
      type: str
    reason_owner:
      description: Owner prefix of the reason, or null.
      type: str
    partitions:
      description: Partitions the node is in.
      type: list
      elements: str
    running_jobs:
      description: Jobs running, completing or suspended on the node.
      type: int
    drained:
      description: Whether the node is drained and idle.
      type: bool
  sample:
    - {name: gpu01, state: IDLE, cpus: 2, real_memory: 1000, gres: "gpu:2", features: [a100],
       reason: "", reason_owner: null, partitions: [gpu], running_jobs: 0, drained: false}
view:
  description: The O(view) the members were judged from.
  returned: always
  type: str
  sample: cluster
member_states:
  description:
    - Each member this host judges (the name as given) and its state, one of V(active), V(draining),
      V(drained), V(failed). With O(view=cluster) every member of O(members), from its Slurm node's state (first
      match wins); with O(view=self) only O(node).
    - V(failed) for DOWN, FAIL or NOT_RESPONDING (sinfo's C(*)); V(drained) for DRAIN while IDLE with nothing
      running; V(draining) for any other DRAIN; V(active) for IDLE, MIXED, ALLOCATED, COMPLETING; V(failed)
      for a node Slurm does not know and for any other state.
    - V(failed) for O(node) when C(slurmd) or C(munged) does not run on this host, whatever the controller says.
  returned: when O(members) is given, or with O(view=self)
  type: dict
  sample: {gpu01.example.org: active, gpu02.example.org: drained, gpu03.example.org: failed}
member_details:
  description:
    - For each member of RV(member_states), what the platform stores and shows. At most 16 scalar values,
      strings cut to 200 characters.
    - "C(view) (V(cluster) or V(self)); C(reason), for a failed member one line saying why (C(node w1 is
      DOWN+NOT_RESPONDING: Not responding), C(slurmd is not running on w1)), otherwise Slurm's reason or null."
    - From the controller, C(slurm_state) (as C(scontrol) prints it, null for a node Slurm does not know),
      C(reason_owner), C(running_jobs), C(cpus), C(real_memory), C(gres), C(features) and C(partitions)
      (comma-separated).
    - From the member's own host, C(slurmd_running) and C(munged_running).
  returned: when RV(member_states) is
  type: dict
  sample:
    gpu01: {view: cluster, slurm_state: MIXED, reason: null, reason_owner: null, running_jobs: 2, cpus: 2,
            real_memory: 1000, gres: "gpu:2", features: "a100", partitions: "gpu,debug"}
    gpu03: {view: self, slurmd_running: false, munged_running: true, reason: slurmd is not running on gpu03}
"""

import platform  # noqa: E402 - Ansible modules import after their docs

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import (  # noqa: E402
    SlurmError,
    SlurmRunner,
    expand_hostlist,
    member_state,
    node_name_of,
    node_summary,
    parse_config,
    parse_partitions,
    running_daemons,
)

# Where this host's processes are read (a test points it at a fake layout).
PROC_ROOT = "/proc"


def _split_list(value):
    return [v for v in (value or "").split(",") if v and v != "(null)"]


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def partition_info(fields):
    return {
        "name": fields.get("PartitionName"),
        "nodes": expand_hostlist(fields.get("Nodes", "") if fields.get("Nodes") != "(null)" else ""),
        "state": fields.get("State", ""),
        "default": fields.get("Default") == "YES",
        "max_time": fields.get("MaxTime", ""),
        "total_cpus": _int(fields.get("TotalCPUs")),
    }


def jobs_per_node(squeue_rows):
    """{node: [job ids]} from `squeue -o %i|%N` rows (node lists expanded)."""
    jobs = {}
    for row in squeue_rows:
        for node in expand_hostlist(row["nodes"]):
            jobs.setdefault(node, []).append(row["job_id"])
    return jobs


def node_info(fields, job_ids):
    summary = node_summary(fields, job_ids)
    gres = fields.get("Gres", "")
    return {
        "name": fields.get("NodeName"),
        "state": summary["state"],
        "cpus": _int(fields.get("CPUTot")),
        "real_memory": _int(fields.get("RealMemory")),
        "gres": "" if gres == "(null)" else gres,
        "features": _split_list(fields.get("AvailableFeatures")),
        "reason": summary["reason"],
        "reason_owner": summary["reason_owner"],
        "partitions": _split_list(fields.get("Partitions")),
        "running_jobs": summary["running_jobs"],
        "drained": summary["drained"],
    }


# Details are what the platform stores and shows per member: at most 16 scalar values, strings of at most 200
# characters.
DETAIL_MAX_CHARS = 200
# The daemons a worker needs on its own host: slurmd, and munged to authenticate it.
WORKER_DAEMONS = ("slurmd", "munged")
# scontrol's words when slurmctld does not answer (refused, timed out, unknown host).
_NO_CONTROLLER = ("Unable to contact slurm controller", "connect failure", "Socket timed out", "Connection refused",
                  "Zero Bytes were transmitted or received")


def _detail(value):
    if isinstance(value, str) and len(value) > DETAIL_MAX_CHARS:
        return value[:DETAIL_MAX_CHARS - 3] + "..."
    return value


def _one_line(text):
    return " ".join((text or "").split())


def cluster_judgement(member, node):
    """(state, details) of one member as slurmctld sees it; ``node`` is its node_info() entry or None."""
    name = node_name_of(member)
    if node is None:
        return "failed", {"view": "cluster", "slurm_state": None,
                          "reason": "node %s is not in the Slurm cluster (scontrol does not know it)" % name}
    state = member_state(node["state"], node["running_jobs"])
    reason = node["reason"] or None
    if state == "failed":
        said = ": " + node["reason"] if node["reason"] else ""
        reason = "node %s is %s%s" % (name, node["state"] or "in no state", said)
    details = {
        "view": "cluster",
        "slurm_state": node["state"],
        "reason": reason,
        "reason_owner": node["reason_owner"],
        "running_jobs": node["running_jobs"],
        "cpus": node["cpus"],
        "real_memory": node["real_memory"],
        "gres": node["gres"],
        "features": ",".join(node["features"]),
        "partitions": ",".join(node["partitions"]),
    }
    return state, details


def self_judgement(node, proc_root):
    """(state, details) of the member on this host, from this host alone: failed when slurmd or munged does not
    run here (slurmctld would notice a dead slurmd only after SlurmdTimeout), active otherwise."""
    pids = running_daemons(WORKER_DAEMONS, proc_root)
    dead = [daemon for daemon in WORKER_DAEMONS if not pids[daemon]]
    details = {"view": "self", "slurmd_running": bool(pids["slurmd"]), "munged_running": bool(pids["munged"])}
    if not dead:
        return "active", details
    details["reason"] = "%s %s not running on %s" % (" and ".join(dead), "is" if len(dead) == 1 else "are", node)
    return "failed", details


def judge(view, members, node, nodes, proc_root):
    """({member: state}, {member: details}) for the members this host judges.

    ``cluster``: every member, from slurmctld's ``nodes``; and the member on this host (``node``, a worker placed
    on the controller's host), if any, also from this host's own daemons, where a failure wins. ``self``: only
    ``node``, from this host alone (when it is a member, or when no members are named)."""
    states, details = {}, {}
    if view == "cluster":
        by_name = dict((n["name"], n) for n in nodes)
        for member in members:
            states[member], details[member] = cluster_judgement(member, by_name.get(node_name_of(member)))
    if node and (node in members or (view == "self" and not members)):
        state, local = self_judgement(node, proc_root)
        if view == "self" or state == "failed":
            states[node] = state
            details[node] = dict(details.get(node, {}), **local)
        else:
            details[node].update((k, v) for k, v in local.items() if k != "view")
    return states, dict((m, dict((k, _detail(v)) for k, v in d.items())) for m, d in details.items())


def member_states(members, nodes):
    """{member: state in the platform's words} for each member name, from node_info() entries."""
    return judge("cluster", members, None, nodes, None)[0]


def gather(runner):
    config = parse_config(runner.run("scontrol", ["show", "config"])[1])
    partitions = parse_partitions(runner.run("scontrol", ["show", "-o", "partition"])[1])
    nodes = runner.nodes()
    jobs = jobs_per_node(runner.running_jobs())
    return {
        "cluster": config.get("ClusterName", ""),
        "slurm_version": config.get("SLURM_VERSION", ""),
        "partitions": [partition_info(p) for p in partitions],
        "nodes": [node_info(n, jobs.get(n.get("NodeName"), [])) for n in nodes],
    }


def failure_message(error, host):
    """One line for fail_json; the platform records it as the control plane's failure."""
    said = _one_line(error.stderr or error.stdout)
    if any(words in said for words in _NO_CONTROLLER):
        return "slurmctld does not answer (scontrol on %s: %s)" % (host, said or "rc=%s" % error.rc)
    return _one_line(str(error))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            slurm_conf=dict(type="path"),
            members=dict(type="list", elements="str"),
            view=dict(type="str", choices=["cluster", "self"], default="cluster"),
            node=dict(type="str"),
        ),
        required_if=[("view", "self", ["node"])],
        supports_check_mode=True,
    )
    params = module.params
    members = None if params["members"] is None else [m.strip() for m in params["members"] if m.strip()]
    node = (params["node"] or "").strip() or None
    if params["view"] == "self":
        states, details = judge("self", members or [], node, [], PROC_ROOT)
        module.exit_json(changed=False, view="self", member_states=states, member_details=details)
    try:
        info = gather(SlurmRunner(module, params["slurm_conf"]))
    except SlurmError as error:
        module.fail_json(msg=failure_message(error, node or platform.node()), rc=error.rc, stdout=error.stdout,
                         stderr=error.stderr)
    info["view"] = "cluster"
    if members is not None:
        info["member_states"], info["member_details"] = judge("cluster", members, node, info["nodes"], PROC_ROOT)
    module.exit_json(changed=False, **info)


if __name__ == "__main__":
    main()

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
    control service maps no Slurm state itself.
  - Written for Slurm 22.05 (Debian 12); run it where C(scontrol) reaches the controller.
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
"""

RETURN = r"""
cluster:
  description: C(ClusterName).
  returned: always
  type: str
  sample: gpuaas-1234
slurm_version:
  description: Version of the controller's configuration (C(SLURM_VERSION)).
  returned: always
  type: str
  sample: 22.05.8
partitions:
  description: The partitions.
  returned: always
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
  returned: always
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
member_states:
  description:
    - Each member of O(members) (the host name as given) and its state, one of V(active), V(draining),
      V(drained), V(failed), from its Slurm node's state. First match wins.
    - V(failed) for DOWN, FAIL or NOT_RESPONDING (sinfo's C(*)); V(drained) for DRAIN while IDLE with nothing
      running; V(draining) for any other DRAIN; V(active) for IDLE, MIXED, ALLOCATED, COMPLETING; V(failed)
      for a node Slurm does not know and for any other state.
  returned: when O(members) is given
  type: dict
  sample: {gpu01.example.org: active, gpu02.example.org: drained, gpu03.example.org: failed}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - Ansible modules import after their docs
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import (  # noqa: E402
    RUNNING_JOB_STATES,
    SlurmError,
    SlurmRunner,
    expand_hostlist,
    member_state,
    node_name_of,
    node_summary,
    parse_config,
    parse_nodes,
    parse_parsable,
    parse_partitions,
)


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


def member_states(members, nodes):
    """{member: state in the platform's words} for each inventory host name, from node_info() entries."""
    by_name = dict((n["name"], n) for n in nodes)
    states = {}
    for member in members:
        node = by_name.get(node_name_of(member))
        states[member] = member_state(node["state"], node["running_jobs"]) if node else member_state(None)
    return states


def gather(runner):
    config = parse_config(runner.run("scontrol", ["show", "config"])[1])
    partitions = parse_partitions(runner.run("scontrol", ["show", "-o", "partition"])[1])
    nodes = parse_nodes(runner.run("scontrol", ["show", "-o", "node"])[1])
    squeue = runner.run("squeue", ["-h", "-t", RUNNING_JOB_STATES, "-o", "%i|%N"])[1]
    jobs = jobs_per_node(parse_parsable(squeue, ("job_id", "nodes")))
    return {
        "cluster": config.get("ClusterName", ""),
        "slurm_version": config.get("SLURM_VERSION", ""),
        "partitions": [partition_info(p) for p in partitions],
        "nodes": [node_info(n, jobs.get(n.get("NodeName"), [])) for n in nodes],
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(slurm_conf=dict(type="path"), members=dict(type="list", elements="str")),
        supports_check_mode=True,
    )
    try:
        info = gather(SlurmRunner(module, module.params["slurm_conf"]))
        if module.params["members"] is not None:
            members = [m.strip() for m in module.params["members"] if m.strip()]
            info["member_states"] = member_states(members, info["nodes"])
        module.exit_json(changed=False, **info)
    except SlurmError as error:
        module.fail_json(msg=str(error), rc=error.rc, stdout=error.stdout, stderr=error.stderr)


if __name__ == "__main__":
    main()

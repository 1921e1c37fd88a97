#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: rke2_etcd_member
short_description: Read an RKE2 cluster's etcd membership and health; add or remove a member, never losing quorum
version_added: "0.1.0"
description:
  - Runs on an RKE2 server and talks to its etcd member through etcd's own gateway (JSON over HTTPS on the client
    port), with the client certificate RKE2 keeps in C(/var/lib/rancher/rke2/server/tls/etcd). No etcdctl is
    needed on the host (RKE2 runs etcd in a static pod).
  - Always returns every member (RV(members)) with its health, read from each member's own status endpoint, and
    the quorum arithmetic (RV(quorum)).
  - O(state=absent) removes the member of O(name). It refuses, changing nothing, when the remaining voting members
    would not keep quorum (fewer healthy members than a majority of those that remain), and says the arithmetic.
    A learner can always be removed. Removing a member that is not there changes nothing.
  - O(state=present) adds a member with O(peer_url) unless one with that peer URL exists; it refuses an addition
    that would lose quorum until the new member starts (a voting member; a learner never does).
  - RKE2 names a server's member C(<node>-<8 hex digits>); O(name) may be that name or the node's name.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description:
      - The member, by its etcd name or by its node's name. Without it the module only reads.
    type: str
  state:
    description:
      - V(absent) removes the member, V(present) adds it (with O(peer_url)).
    type: str
    choices: [present, absent]
    default: absent
  peer_url:
    description: The new member's peer URL, such as V(https://10.0.0.12:2380). Required with O(state=present).
    type: str
  learner:
    description: Add the member as a learner (a non-voting member, to be promoted once it has caught up).
    type: bool
    default: false
  settle:
    description:
      - Seconds to keep asking while etcd refuses the change as C(unhealthy cluster). etcd refuses a membership
        change until every member it counts on has been connected for 5 seconds (its strict reconfiguration check),
        as right after a server restarted; the refusal changes nothing and the change is safe to ask again.
    type: int
    default: 30
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
  - gpuaas.apps.rke2.etcd
"""

EXAMPLES = r"""
- name: Read the etcd membership and quorum
  gpuaas.apps.rke2_etcd_member:
  register: etcd

- name: Remove the leaving server's member (refused when quorum would be lost)
  gpuaas.apps.rke2_etcd_member:
    name: server3
    state: absent
"""

RETURN = r"""
members:
  description: Every member, as read before any change.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Member id (decimal string).
      type: str
    name:
      description: Member name (empty for a member added but never started).
      type: str
    node:
      description: The node the member belongs to (its name without RKE2's suffix).
      type: str
    peer_urls:
      description: Peer URLs.
      type: list
      elements: str
    client_urls:
      description: Client URLs.
      type: list
      elements: str
    learner:
      description: Whether it is a non-voting learner.
      type: bool
    healthy:
      description: Whether its own status endpoint answered and it knows a leader.
      type: bool
    leader:
      description: Whether it is the leader.
      type: bool
    error:
      description: Why it is not healthy, or null.
      type: str
  sample:
    - {id: "1234", name: s1-0a1b2c3d, node: s1, peer_urls: ["https://10.0.0.11:2380"],
       client_urls: ["https://10.0.0.11:2379"], learner: false, healthy: true, leader: true, error: null}
quorum:
  description: The quorum arithmetic of the voting members.
  returned: always
  type: dict
  contains:
    voters:
      description: Voting members.
      type: int
    healthy:
      description: Healthy voting members.
      type: int
    needed:
      description: Members quorum needs (a majority of the voters).
      type: int
    has_quorum:
      description: Whether enough are healthy.
      type: bool
    can_lose:
      description: Healthy members that may fail before quorum is lost.
      type: int
  sample: {voters: 3, healthy: 3, needed: 2, has_quorum: true, can_lose: 1}
member:
  description: The member O(name) names, as read before any change; null when there is none.
  returned: when O(name) is given
  type: dict
"""

import time  # noqa: E402 - Ansible modules import after their docs

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.rke2 import (  # noqa: E402
    ETCD_ARGUMENT_SPEC,
    Etcd,
    Rke2Error,
    quorum_needed,
    quorum_summary,
    removal_problem,
)


def find(members, name):
    for member in members:
        if name and name in (member["name"], member["node"]):
            return member
    return None


def addition_problem(members, peer_url, learner):
    if learner:
        return None
    voters = [m for m in members if not m["learner"]]
    healthy = len([m for m in voters if m["healthy"]])
    needed = quorum_needed(len(voters) + 1)
    if healthy < needed:
        return ("adding a voting member at %s would lose quorum until it starts: %d of %d voting members are "
                "healthy, and %d members need %d" % (peer_url, healthy, len(voters), len(voters) + 1, needed))
    return None


def plan(members, params):
    """(change, member, problem): change is None, "add" or "remove"."""
    name, state = params["name"], params["state"]
    if state == "present":
        existing = [m for m in members if params["peer_url"] in m["peer_urls"]]
        if existing:
            return None, existing[0], None
        return "add", None, addition_problem(members, params["peer_url"], params["learner"])
    member = find(members, name)
    if name is None or member is None:
        return None, member, None
    return "remove", member, removal_problem(members, member["name"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="absent"),
            peer_url=dict(type="str"),
            learner=dict(type="bool", default=False),
            settle=dict(type="int", default=30),
            **ETCD_ARGUMENT_SPEC
        ),
        required_if=[("state", "present", ["peer_url"])],
        supports_check_mode=True,
    )
    params = module.params
    etcd = Etcd.from_params(params)
    try:
        members = etcd.members()
    except Rke2Error as error:
        module.fail_json(msg="etcd membership cannot be read: %s" % error)
    result = dict(changed=False, members=members, quorum=quorum_summary(members))
    change, member, problem = plan(members, params)
    if params["name"] is not None or change:
        result["member"] = member
    if problem:
        module.fail_json(msg=problem, **result)
    if change:
        before = sorted(m["name"] or m["peer_urls"][0] for m in members)
        if change == "add":
            after = sorted(before + [params["name"] or params["peer_url"]])
        else:
            after = [n for n in before if n != (member["name"] or member["peer_urls"][0])]
        result["changed"] = True
        result["diff"] = dict(before="\n".join(before) + "\n", after="\n".join(after) + "\n",
                              before_header="etcd members", after_header="etcd members")
        if not module.check_mode:
            try:
                reconfigure(etcd, change, member, params)
            except Rke2Error as error:
                result["changed"] = False
                module.fail_json(msg=str(error), **result)
    module.exit_json(**result)


def reconfigure(etcd, change, member, params):
    deadline = time.time() + params["settle"]
    while True:
        try:
            if change == "add":
                return etcd.add(params["peer_url"], params["learner"])
            return etcd.remove(member["id"])
        except Rke2Error as error:
            # etcd's strict reconfiguration check: a transient refusal, nothing changed.
            if "unhealthy cluster" not in str(error) or time.time() >= deadline:
                raise
            time.sleep(1)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: slurm_node
short_description: Read a Slurm node's state, or drain, resume or down it with an owned reason
version_added: "0.1.0"
description:
  - Reads a node with C(scontrol show -o node) and its running jobs with C(squeue), and optionally sets
    its state with C(scontrol update).
  - "Reasons the platform sets are stored as C(<owner>: <reason>). A drain or down set by anyone else
    (a reason without that prefix, including Slurm's own such as C(Not responding)) is never cleared or
    overwritten unless O(force=true)."
  - When the node already is in the requested state under someone else's reason, nothing is changed and
    a warning says so.
  - Can wait until a draining node has no running jobs any more (O(wait=true)), and after a resume waits
    until the node is back in service and responding (Slurm 22.05 shows it as C(idle*) for about a
    second).
  - Written for Slurm 22.05 (Debian 12) and 24.11 (Debian 13, whose nodes and jobs it reads as JSON); run it on
    a host where C(scontrol) reaches the controller, usually the controller itself.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  name:
    description: Slurm node name (C(NodeName)).
    type: str
    required: true
  state:
    description:
      - V(drain) stops new jobs from starting on the node; running jobs go on.
      - V(down) takes the node out of service at once; Slurm kills or requeues the jobs running on it.
      - V(resume) returns a drained or down node to service.
      - Omitted, the module only reads the node.
    type: str
    choices: [drain, resume, down]
  reason:
    description:
      - "Why the node is drained or down. Stored as C(<owner>: <reason>). Required for V(drain) and V(down)."
    type: str
  owner:
    description:
      - Prefix that marks the reasons this caller sets, so that it only clears its own drains.
      - Letters, digits, C(_), C(.) and C(-).
    type: str
    default: gpuaas
  force:
    description:
      - Clear or overwrite a drain or down that someone else set.
    type: bool
    default: false
  wait:
    description:
      - With O(state=drain), wait until the node is fully drained, that is no job runs on it any more.
    type: bool
    default: false
  timeout:
    description:
      - Seconds to wait for a drain (O(wait=true)) or for a resumed node to come back; the module fails
        when they run out and names the jobs still running.
    type: int
    default: 600
  poll_interval:
    description: Seconds between two looks at the node while waiting.
    type: float
    default: 2.0
  progress_interval:
    description:
      - With O(state=drain) and O(wait=true), the task prints a line every this many seconds while it waits,
        naming the node and the jobs still running on it, so that a long drain is not a silent one. The
        module's action plugin does it by waiting in steps of this length.
      - V(0) waits in one step, without progress lines.
    type: float
    default: 30
  missing_ok:
    description:
      - When the node does not exist in Slurm, return RV(exists=false) instead of failing. Useful when
        removing a member that may be gone already.
    type: bool
    default: false
  slurm_conf:
    description:
      - Path of the slurm.conf the Slurm commands use (exported as E(SLURM_CONF)). Default is Slurm's own.
    type: path
notes:
  - Supports check mode (nothing is changed and nothing is waited for) and diff mode (state and reason).
  - "A progress line while a drain is awaited (O(progress_interval)) reads, for host ctl and node gpu07:
    [ctl] slurm_node gpu07: still draining, 2 job(s) running (ids: 1041, 1042_3); waited 30s of 3600s"
extends_documentation_fragment:
  - gpuaas.apps.attributes.check_and_diff
"""

EXAMPLES = r"""
- name: Drain a worker and wait for its jobs to finish
  gpuaas.apps.slurm_node:
    name: gpu07
    state: drain
    reason: member drain requested by operation 1234
    wait: true
    timeout: 3600

- name: Return it to service (fails if someone else drained it in the meantime)
  gpuaas.apps.slurm_node:
    name: gpu07
    state: resume

- name: Read a node
  gpuaas.apps.slurm_node:
    name: gpu07
  register: node

- name: Take over a drain set by a health checker
  gpuaas.apps.slurm_node:
    name: gpu07
    state: resume
    force: true
"""

RETURN = r"""
node:
  description: Node name.
  returned: always
  type: str
  sample: gpu07
exists:
  description: Whether Slurm knows the node (false only with O(missing_ok=true)).
  returned: always
  type: bool
  sample: true
state:
  description: Slurm's state string, base state and flags joined with C(+).
  returned: when the node exists
  type: str
  sample: MIXED+DRAIN
base_state:
  description: The base state (IDLE, MIXED, ALLOCATED, DOWN, ...).
  returned: when the node exists
  type: str
  sample: MIXED
flags:
  description: State flags (DRAIN, NOT_RESPONDING, ...).
  returned: when the node exists
  type: list
  elements: str
  sample: [DRAIN]
drain:
  description: Whether the node carries the DRAIN flag (draining or drained).
  returned: when the node exists
  type: bool
  sample: true
drained:
  description: Whether the node is drained and no job runs on it.
  returned: when the node exists
  type: bool
  sample: false
down:
  description: Whether the node is DOWN.
  returned: when the node exists
  type: bool
  sample: false
responding:
  description: Whether slurmctld hears from the node's slurmd.
  returned: when the node exists
  type: bool
  sample: true
reason:
  description: The reason text without Slurm's C([user@time]) stamp; empty when none.
  returned: when the node exists
  type: str
  sample: "gpuaas: member drain requested by operation 1234"
reason_owner:
  description: The owner prefix of the reason, or null when it has none.
  returned: when the node exists
  type: str
  sample: gpuaas
running_jobs:
  description: Number of jobs running, completing or suspended on the node.
  returned: when the node exists
  type: int
  sample: 2
job_ids:
  description: Their job ids.
  returned: when the node exists
  type: list
  elements: str
  sample: ["1041", "1042_3"]
timed_out:
  description: Set (true) when the module failed because a wait ran out of time.
  returned: when a wait timed out
  type: bool
  sample: true
"""

import re  # noqa: E402 - Ansible modules import after their documentation
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import (  # noqa: E402
    SlurmError,
    SlurmRunner,
    join_state,
    node_summary,
    owned_reason,
    wait_timed_out_message,
)

_OWNER_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
# Flags a node loses when it returns to service.
_OUT_OF_SERVICE_FLAGS = ("DRAIN", "FAIL", "NOT_RESPONDING")


class Refused(Exception):
    """The requested change would clear or overwrite someone else's drain/down."""


def held(facts):
    """Out of service with a reason: drained, down or failing."""
    return facts["drain"] or facts["down"] or "FAIL" in facts["flags"]


def plan_change(facts, state, reason, owner, force):
    """What to do to reach ``state``: (action or None, warning or None); raises Refused.

    ``reason`` is the full, owner-prefixed reason. A reason without our owner prefix belongs to someone
    else: it is only replaced when ``force``. When the node is already in the requested state under a
    foreign reason, it is left alone (with a warning) unless ``force``.
    """
    foreign = bool(facts["reason"]) and facts["reason_owner"] != owner
    who = "reason '%s'" % facts["reason"]

    if state == "resume":
        if not held(facts):
            return None, None
        if foreign and not force:
            raise Refused("node %s is %s by someone else (%s); not resuming it without force=true"
                          % (facts["node"], facts["state"], who))
        return "resume", None

    already = facts["drain"] if state == "drain" else facts["down"]
    if already:
        if facts["reason"] == reason:
            return None, None
        if foreign and not force:
            return None, ("node %s is already %s under someone else's %s; left as it is (force=true takes "
                          "it over)" % (facts["node"], facts["state"], who))
        return state, None
    if held(facts) and foreign and not force:
        raise Refused("node %s is %s by someone else (%s); setting it to %s would overwrite that reason; "
                      "use force=true to do it anyway" % (facts["node"], facts["state"], who, state))
    return state, None


def predict(facts, action, reason):
    """The state and reason ``action`` leads to (for check mode and diff)."""
    base, flags = facts["base_state"], list(facts["flags"])
    if action == "resume":
        return {"state": join_state("IDLE" if base == "DOWN" else base,
                                    [f for f in flags if f not in _OUT_OF_SERVICE_FLAGS]), "reason": ""}
    if action == "drain":
        return {"state": join_state(base, flags if "DRAIN" in flags else flags + ["DRAIN"]), "reason": reason}
    if action == "down":
        return {"state": join_state("DOWN", [f for f in flags if f == "DRAIN"]), "reason": reason}
    return {"state": facts["state"], "reason": facts["reason"]}


def in_service(facts):
    return not held(facts) and facts["responding"]


class NodeManager:
    def __init__(self, module, runner):
        self.module = module
        self.runner = runner
        self.name = module.params["name"]

    def facts(self):
        fields = self.runner.show_node(self.name)
        if fields is None:
            return None
        return node_summary(fields, self.runner.running_job_ids(self.name))

    def wait_for(self, done, what):
        params = self.module.params
        deadline = time.monotonic() + params["timeout"]
        facts = self.facts()
        while facts is not None and not done(facts):
            if time.monotonic() >= deadline:
                self.module.fail_json(msg=wait_timed_out_message(params["timeout"], self.name, what, facts),
                                      timed_out=True, **facts)
            time.sleep(params["poll_interval"])
            facts = self.facts()
        if facts is None:
            self.module.fail_json(msg="node %s disappeared from Slurm while waiting for it to %s"
                                  % (self.name, what))
        return facts

    def update(self, action, reason):
        args = ["update", "nodename=%s" % self.name, "state=%s" % action]
        if action != "resume":
            args.append("reason=%s" % reason)
        self.runner.run("scontrol", args)


def validate(module):
    params = module.params
    if not _OWNER_NAME_RE.match(params["owner"]):
        module.fail_json(msg="owner '%s' may only contain letters, digits, '_', '.' and '-'"
                             % params["owner"])
    if params["state"] in ("drain", "down"):
        if not (params["reason"] or "").strip():
            module.fail_json(msg="state=%s needs a non-empty reason" % params["state"])
        if "\n" in params["reason"]:
            module.fail_json(msg="reason must be a single line")
    if params["timeout"] < 0 or params["poll_interval"] <= 0 or params["progress_interval"] < 0:
        module.fail_json(msg="timeout and progress_interval must be >= 0 and poll_interval > 0")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["drain", "resume", "down"]),
            reason=dict(type="str"),
            owner=dict(type="str", default="gpuaas"),
            force=dict(type="bool", default=False),
            wait=dict(type="bool", default=False),
            timeout=dict(type="int", default=600),
            poll_interval=dict(type="float", default=2.0),
            progress_interval=dict(type="float", default=30.0),
            missing_ok=dict(type="bool", default=False),
            slurm_conf=dict(type="path"),
        ),
        required_if=[("state", "drain", ["reason"]), ("state", "down", ["reason"])],
        supports_check_mode=True,
    )
    validate(module)
    params = module.params
    manager = NodeManager(module, SlurmRunner(module, params["slurm_conf"]))
    try:
        before = manager.facts()
        if before is None:
            if params["missing_ok"]:
                module.exit_json(changed=False, node=params["name"], exists=False)
            module.fail_json(msg="node %s does not exist in Slurm (scontrol show node found nothing); "
                                 "use missing_ok=true if that is fine" % params["name"])
        state = params["state"]
        if state is None:
            module.exit_json(changed=False, exists=True, **before)

        reason = owned_reason(params["owner"], params["reason"].strip()) if state != "resume" else None
        try:
            action, warning = plan_change(before, state, reason, params["owner"], params["force"])
        except Refused as refused:
            module.fail_json(msg=str(refused), exists=True, **before)
        if warning:
            module.warn(warning)

        result = dict(changed=action is not None, exists=True)
        if module.check_mode:
            after = before
            result["diff"] = dict(before=predict(before, None, None), after=predict(before, action, reason))
        else:
            if action:
                manager.update(action, reason)
            after = manager.facts()
            if after is None:
                module.fail_json(msg="node %s disappeared from Slurm during the change" % params["name"])
            if state == "resume" and action:
                after = manager.wait_for(in_service, "return to service")
            elif state == "drain" and params["wait"]:
                after = manager.wait_for(lambda f: f["drained"], "drain")
            result["diff"] = dict(before=predict(before, None, None), after=predict(after, None, None))
        result.update(after)
        module.exit_json(**result)
    except SlurmError as error:
        module.fail_json(msg=str(error), rc=error.rc, stdout=error.stdout, stderr=error.stderr)


if __name__ == "__main__":
    main()

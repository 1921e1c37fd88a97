# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Action plugin of gpuaas.apps.slurm_node: a drain that is awaited reports its progress.

A module cannot print while it runs, so a drain with wait=true is awaited in steps of progress_interval
seconds: the first step sets the drain without waiting (its result holds the change and the diff's "before"),
each further one waits up to progress_interval seconds, and before each a line names the node and the jobs
still running on it. The whole wait keeps the task's timeout; running out of it fails with the module's own
message. Everything else goes to the module unchanged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import time

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import wait_timed_out_message

display = Display()

MODULE = "gpuaas.apps.slurm_node"
# The module's defaults for the options read here.
DEFAULT_TIMEOUT = 600
DEFAULT_PROGRESS_INTERVAL = 30.0


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        try:
            step_length = float(args.get("progress_interval", DEFAULT_PROGRESS_INTERVAL))
            timeout = int(args.get("timeout", DEFAULT_TIMEOUT))
            stepped = (args.get("state") == "drain" and boolean(args.get("wait", False), strict=True)
                       and step_length > 0 and not self._play_context.check_mode)
        except (TypeError, ValueError):
            stepped = False  # the module reports the bad value
        if not stepped:
            result.update(self._module(args, task_vars))
            return result

        started = time.monotonic()
        first = self._module(dict(args, wait=False), task_vars)
        current, changed = dict(first), bool(first.get("changed"))
        while not (current.get("failed") or current.get("exists") is False or current.get("drained")):
            waited = time.monotonic() - started
            if waited >= timeout:
                current.update(failed=True, timed_out=True,
                               msg=wait_timed_out_message(timeout, args["name"], "drain", current))
                break
            self._progress(task_vars, args["name"], current, waited, timeout)
            step = self._module(dict(args, timeout=int(math.ceil(min(step_length, timeout - waited)))), task_vars)
            if step.get("timed_out"):  # this step ran out, not necessarily the whole wait
                step = dict((k, v) for k, v in step.items() if k not in ("failed", "timed_out", "msg"))
            changed = changed or bool(step.get("changed"))
            current.update(step)  # the node as last seen
        result.update(current)
        result["changed"] = changed
        if "diff" in first and "diff" in current:
            result["diff"] = dict(before=first["diff"]["before"], after=current["diff"]["after"])
        warnings = list(dict.fromkeys(first.get("warnings", []) + current.get("warnings", [])))
        if warnings:
            result["warnings"] = warnings
        return result

    def _module(self, args, task_vars):
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    @staticmethod
    def _progress(task_vars, node, facts, waited, timeout):
        display.display("[%s] slurm_node %s: still draining, %d job(s) running (ids: %s); waited %ds of %ds" % (
            (task_vars or {}).get("inventory_hostname", "?"), node, facts.get("running_jobs", 0),
            ", ".join(facts.get("job_ids", [])) or "none", waited, timeout))

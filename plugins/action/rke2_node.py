# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Action plugin of gpuaas.apps.rke2_node: a drain that waits reports its progress.

A module cannot print while it runs, so state=drained drains in steps of progress_interval seconds: each step is
one module run whose kubectl drain gets that step's timeout. A step that runs out of it (timed_out) has evicted
what it could; a line then names the pods still on the node and why, and the next step goes on, until the task's
timeout, when the task fails with the module's own message for the whole wait. Any other result ends the task.
Everything else goes to the module unchanged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.gpuaas.apps.plugins.module_utils.rke2 import drain_timed_out_message, pods_left_text

display = Display()

MODULE = "gpuaas.apps.rke2_node"
# The module's defaults for the options read here.
DEFAULT_TIMEOUT = 600
DEFAULT_PROGRESS_INTERVAL = 30
# Pods a progress line names before it says how many more there are.
PODS_NAMED = 5


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        try:
            step_length = int(args.get("progress_interval", DEFAULT_PROGRESS_INTERVAL))
            timeout = int(args.get("timeout", DEFAULT_TIMEOUT))
            stepped = (args.get("state") == "drained" and step_length > 0 and timeout >= 1
                       and not self._play_context.check_mode)
        except (TypeError, ValueError):
            stepped = False  # the module reports the bad value
        if not stepped:
            result.update(self._module(args, task_vars))
            return result

        started = time.monotonic()
        first, changed, evicted = None, False, []
        while True:
            left = timeout - (time.monotonic() - started)
            step = self._module(dict(args, timeout=max(1, int(math.ceil(min(step_length, left))))), task_vars)
            first = first or step
            changed = changed or bool(step.get("changed"))
            evicted += [p for p in step.get("evicted", []) if p not in evicted]
            if not step.get("timed_out"):
                break
            waited = time.monotonic() - started
            if waited >= timeout:  # the whole wait ran out, not just this step
                step["msg"] = drain_timed_out_message(args["name"], timeout, step.get("pods_left_reasons", {}),
                                                      step.get("blocking_budgets", []))
                break
            self._progress(task_vars, args["name"], step, waited, timeout)
        result.update(step)
        result.update(changed=changed, evicted=evicted)
        if "diff" in first and "diff" in step:
            result["diff"] = dict(before=first["diff"]["before"], after=step["diff"]["after"])
        warnings = list(dict.fromkeys(first.get("warnings", []) + step.get("warnings", [])))
        if warnings:
            result["warnings"] = warnings
        return result

    def _module(self, args, task_vars):
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    @staticmethod
    def _progress(task_vars, node, step, waited, timeout):
        reasons = step.get("pods_left_reasons", {})
        display.display("[%s] rke2_node %s: still draining, %d pod(s) left (%s); waited %ds of %ds" % (
            (task_vars or {}).get("inventory_hostname", "?"), node, len(reasons),
            pods_left_text(reasons, PODS_NAMED) or "none", waited, timeout))

# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Callback plugin gpuaas.apps.task_timing: how long each task took on each host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: task_timing
type: aggregate
short_description: Times each task on each host
version_added: 0.1.0
description:
  - Records, for every task and every host it ran on, when the task started on that host (seconds after the
    playbook started), how long it took and how it ended.
  - Writes the record as JSON to O(path) when the playbook ends; without O(path), prints the tasks that took
    the most time, summed over hosts, and each play's wall time.
  - Unlike a per-task profile, a task that is slow on one host only shows as such, and the play wall times
    show how much of the run was spent waiting for the slowest host.
requirements:
  - Enable it in ansible.cfg (C(callbacks_enabled = gpuaas.apps.task_timing)) or with
    E(ANSIBLE_CALLBACKS_ENABLED).
options:
  path:
    description: File to write the JSON record to.
    type: path
    env:
      - name: GPUAAS_TASK_TIMING_PATH
    ini:
      - section: callback_task_timing
        key: path
  top:
    description: How many tasks the printed summary lists.
    type: int
    default: 15
    env:
      - name: GPUAAS_TASK_TIMING_TOP
    ini:
      - section: callback_task_timing
        key: top
"""

import json  # noqa: E402
import time  # noqa: E402

from ansible.plugins.callback import CallbackBase  # noqa: E402


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuaas.apps.task_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._started = time.monotonic()
        self._play = None
        self._plays = []
        self._running = {}
        self._tasks = []

    def _now(self):
        return time.monotonic() - self._started

    def _end_play(self):
        if self._play is not None:
            self._play["seconds"] = round(self._now() - self._play["start"], 3)

    def v2_playbook_on_play_start(self, play):
        self._end_play()
        self._play = {"name": play.get_name().strip(), "start": round(self._now(), 3)}
        self._plays.append(self._play)

    def v2_runner_on_start(self, host, task):
        self._running[(host.get_name(), task._uuid)] = self._now()

    def _finish(self, result, status):
        host, task = result._host.get_name(), result._task
        start = self._running.pop((host, task._uuid), None)
        if start is None:
            return
        self._tasks.append({
            "play": self._play["name"] if self._play else "",
            "task": task.get_name().strip(),
            "action": task.action,
            "host": host,
            "start": round(start, 3),
            "seconds": round(self._now() - start, 3),
            "status": status,
        })

    def v2_runner_on_ok(self, result):
        self._finish(result, "changed" if result._result.get("changed") else "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._finish(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._finish(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._finish(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        self._end_play()
        record = {"seconds": round(self._now(), 3), "plays": self._plays, "tasks": self._tasks}
        path = self.get_option("path")
        if path:
            with open(path, "w") as handle:
                json.dump(record, handle, indent=1)
            return
        totals = {}
        for entry in self._tasks:
            key = (entry["play"], entry["task"])
            seconds, hosts = totals.get(key, (0.0, 0))
            totals[key] = (seconds + entry["seconds"], hosts + 1)
        self._display.banner("TASK TIMING (seconds summed over hosts)")
        ranked = sorted(totals.items(), key=lambda item: item[1][0], reverse=True)
        for (play, task), (seconds, hosts) in ranked[:self.get_option("top")]:
            self._display.display("%8.2f  %2d host(s)  %s : %s" % (seconds, hosts, play, task))
        self._display.banner("PLAY WALL TIME (seconds)")
        for play in self._plays:
            self._display.display("%8.2f  %s" % (play.get("seconds", 0.0), play["name"]))

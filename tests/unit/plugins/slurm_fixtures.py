"""Real Slurm output captured by capture_fixtures.py (22.05 text, 24.11 JSON), and a replaying stand-in for Slurm's CLI.

ReplaySlurm is a test double: it answers a module's scontrol/sacctmgr/squeue calls with recorded real
output, so the module's flow (waiting, timeouts, refusals) can be tested without daemons. The *_live tests
run the same modules against real daemons.
"""

import json
import os
from pathlib import Path
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

FIXTURES = Path(__file__).parent / "fixtures"
INDEX = json.loads((FIXTURES / "index.json").read_text())


# The recorded cluster's node (slurm_local.py) as slurm_info reports it while jobs run on it, in 22.05's text and
# 24.11's JSON alike: the tests set running_jobs to what their recording holds.
GPU01_MIXED = {
    "name": "gpu01",
    "state": "MIXED",
    "cpus": 2,
    "real_memory": 1000,
    "gres": "gpu:2",
    "features": ["a100", "test"],
    "reason": "",
    "reason_owner": None,
    "partitions": ["gpu", "debug"],
    "drained": False,
}


def text(name):
    return (FIXTURES / f"{name}.txt").read_text()


def recorded(name):
    """(rc, stdout, stderr) exactly as the command in index.json produced them."""
    return INDEX[name]["rc"], text(name), INDEX[name]["stderr"]


class ModuleExit(Exception):
    def __init__(self, result, failed):
        super().__init__(result.get("msg", ""))
        self.result = result
        self.failed = failed


class ReplaySlurm:
    """Answers commands whose argv contains all words of a key, in order of registration.

    ``answers`` maps a tuple of words (e.g. ("squeue",)) to a list of (rc, out, err); each call takes the
    next answer, the last one repeats. ``calls`` records every argv (tool name first).
    """

    def __init__(self, answers, release="slurm-wlm 22.05.8"):
        # `scontrol --version` first: it tells the modules whether to read JSON (24.11) or text (22.05).
        self.answers = {("scontrol", "--version"): [(0, release + "\n", "")]}
        self.answers.update((key, list(values)) for key, values in answers.items())
        self.calls = []

    def __call__(self, args, **kwargs):
        argv = [os.path.basename(args[0])] + [str(a) for a in args[1:]]
        self.calls.append(argv)
        for key, values in self.answers.items():
            if all(word in argv for word in key):
                return values.pop(0) if len(values) > 1 else values[0]
        raise AssertionError(f"unexpected command {argv}")

    def called(self, *words):
        return [c for c in self.calls if all(w in c for w in words)]


def run_module(main, args, slurm, check_mode=False):
    """Run a module's main() with ``args`` against ``slurm``; returns the ModuleExit it ended with."""
    if check_mode:
        args = dict(args, _ansible_check_mode=True)

    def exit_json(module, **result):
        raise ModuleExit(result, failed=False)

    def fail_json(module, msg, **result):
        raise ModuleExit(dict(result, msg=msg), failed=True)

    with (
        patch_module_args(args),
        mock.patch.object(basic.AnsibleModule, "run_command", lambda self, argv, **kw: slurm(argv, **kw)),
        mock.patch.object(basic.AnsibleModule, "get_bin_path", lambda self, name, **kw: f"/usr/bin/{name}"),
        mock.patch.object(basic.AnsibleModule, "exit_json", exit_json),
        mock.patch.object(basic.AnsibleModule, "fail_json", fail_json),
        pytest.raises(ModuleExit) as ended,
    ):
        main()
    return ended.value

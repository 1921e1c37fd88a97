"""The molecule scenario of the oci_workload role (molecule/oci_workload): one Debian 13 test host running
podman inside, a real registry its prepare step starts, a signed test image. It converges, proves a second
converge changes nothing, runs the converge again under --check, verifies, tears the workload down (the
role's teardown ends in gpuaas.apps.teardown_check), and removes its host and the registry."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gpuaas_api import testhosts

from .slurm_harness import ROOT

pytestmark = [pytest.mark.hosts, pytest.mark.slow]


def test_molecule_scenario_oci_workload():
    for flavor in ("registry", "oci-trixie"):
        testhosts.build(flavor)  # one at a time: both are built on the Debian 13 base image
    testhosts.ensure_network()
    venv_bin = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{venv_bin}:{os.environ['PATH']}", ANSIBLE_NOCOLOR="1", NO_COLOR="1")
    # One stream, so that each step's Ansible output sits between molecule's lines about the step.
    proc = subprocess.run([str(venv_bin / "molecule"), "test", "-s", "oci_workload"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200, check=False)
    output = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)
    assert proc.returncode == 0, f"molecule test -s oci_workload failed:\n{output[-6000:]}"
    # "[oci_workload > verify] Executed: Successful" (or "oci_workload ➜ verify: ..." on a terminal)
    ran = re.findall(r"oci_workload(?: > | ➜ )(\w+)\]?:? Executed: Successful", output)
    for step in ("prepare", "converge", "idempotence", "check", "verify", "side_effect", "cleanup"):
        assert step in ran, f"molecule did not run the {step} step: {ran}"
    assert "Nothing left on mol-oci." in output
    # Under --check, the converged host needs no change.
    check = re.search(r"oci_workload(?: > | ➜ )check\]?:? Executing(.*?)oci_workload(?: > | ➜ )check\]?:? Executed",
                      output, re.S)
    changed = re.findall(r"(\S+)\s+: ok=\d+\s+changed=(\d+)", check.group(1))
    assert changed and all(n == "0" for _, n in changed), f"--check would change something: {changed}"

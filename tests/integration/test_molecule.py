"""Runs the molecule scenarios (podman driver) against real systemd containers, with the command the README
gives role developers: scripts/molecule.sh (`make molecule SCENARIO=...`), which builds what molecule needs.

single_node installs Slurm from the Debian mirror; cluster and accounting use the image with the
packages pre-installed. Each scenario converges, proves a second converge changes nothing, runs the
converge playbook again under --check, verifies, and destroys its containers and its network.
"""

import os
import re
import subprocess

import pytest

from .slurm_harness import ROOT

pytestmark = [pytest.mark.hosts, pytest.mark.slow]


@pytest.mark.parametrize("scenario", ["single_node", "cluster", "accounting"])
def test_molecule_scenario(scenario):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", NO_COLOR="1")
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts/molecule.sh"), scenario],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    output = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"scripts/molecule.sh {scenario} failed:\n{output[-6000:]}"
    ran = re.findall(rf"{scenario} ➜ (\w+): Executed: Successful", output)
    for step in ("converge", "idempotence", "check", "verify"):
        assert step in ran, f"molecule did not run the {step} step: {ran}"
    # Under --check, the converged cluster needs no change.
    check = output[output.index(f"{scenario} ➜ check: Executing"):output.index(f"{scenario} ➜ check: Executed")]
    changed = re.findall(r"(\S+)\s+: ok=\d+\s+changed=(\d+)", check)
    assert changed and all(n == "0" for _, n in changed), f"--check would change something: {changed}"


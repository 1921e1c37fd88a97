"""Runs the molecule scenarios (podman driver) against real systemd containers.

single_node installs Slurm from the Debian mirror; cluster and accounting use the image with the
packages pre-installed. Each scenario converges, proves a second converge changes nothing, verifies,
and destroys its containers.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .slurm_harness import ROOT, testhosts

pytestmark = [pytest.mark.hosts, pytest.mark.slow]


@pytest.mark.parametrize("scenario", ["single_node", "cluster", "accounting"])
def test_molecule_scenario(scenario):
    testhosts.build_slurm(rebuild=False)  # builds the base image too
    testhosts.ensure_network()
    venv_bin = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{venv_bin}:{os.environ['PATH']}", ANSIBLE_NOCOLOR="1", NO_COLOR="1")
    proc = subprocess.run(
        [str(venv_bin / "molecule"), "test", "-s", scenario],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"molecule test -s {scenario} failed:\n{output[-6000:]}"

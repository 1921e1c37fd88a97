"""Runs the molecule scenarios (podman driver) against real systemd containers, with the command the README
gives role developers: scripts/molecule.sh (`make molecule SCENARIO=...`), which builds what molecule needs.

single_node installs Slurm 24.11 on Debian 13 from the Debian mirror; cluster (a controller with slurmdbd and
enforced associations, two workers) runs Slurm 22.05 on Debian 12 from the image with the packages pre-installed.
Each scenario converges, proves a second converge changes nothing, runs the converge playbook again under --check,
verifies, and destroys its containers and its network.
"""

import pytest

from .molecule_run import check_step_changes, run_scenario, steps_run

pytestmark = [pytest.mark.hosts, pytest.mark.slow]


@pytest.mark.parametrize("scenario", ["single_node", "cluster"])
def test_molecule_scenario(scenario):
    output = run_scenario(scenario)
    ran = steps_run(output, scenario)
    for step in ("converge", "idempotence", "check", "verify"):
        assert step in ran, f"molecule did not run the {step} step: {ran}"
    # Under --check, the converged cluster needs no change.
    changed = check_step_changes(output, scenario)
    assert changed and all(n == "0" for _, n in changed), f"--check would change something: {changed}"

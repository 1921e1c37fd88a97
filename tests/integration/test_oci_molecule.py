"""The molecule scenario of the oci_workload role (molecule/oci_workload), run with the command the README
gives role developers (scripts/molecule.sh): one Debian 13 test host running podman inside, a real registry
its prepare step starts, a signed test image. It converges, proves a second converge changes nothing, runs
the converge again under --check, verifies, tears the workload down (the role's teardown ends in
gpuaas.apps.teardown_check), and removes its host and the registry."""

import pytest

from .molecule_run import check_step_changes, run_scenario, steps_run

pytestmark = [pytest.mark.hosts, pytest.mark.slow]


def test_molecule_scenario_oci_workload():
    output = run_scenario("oci_workload")
    ran = steps_run(output, "oci_workload")
    for step in ("prepare", "converge", "idempotence", "check", "verify", "side_effect", "cleanup"):
        assert step in ran, f"molecule did not run the {step} step: {ran}"
    assert "Nothing left on mol-oci." in output
    # Under --check, the converged host needs no change.
    changed = check_step_changes(output, "oci_workload")
    assert changed and all(n == "0" for _, n in changed), f"--check would change something: {changed}"

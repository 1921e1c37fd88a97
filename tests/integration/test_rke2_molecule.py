"""The molecule scenarios of the RKE2 roles.

molecule/rke2 runs with the command the README gives role developers (scripts/molecule.sh) against the RKE2 TEST
DOUBLE (tests/rke2_double/): one server and one agent of the rke2 test host flavour, the double's release served by
the server as a site mirror and pinned by sha256, a token its prepare step generates for the run. It converges
(gpuaas.apps.rke2_deploy), proves a second converge changes nothing, runs the converge again under --check, verifies
with rke2_info (every node Ready, etcd healthy, the pinned version), decommissions (gpuaas.apps.rke2_decommission,
whose proof ends in "Nothing left on <host>."), and removes its hosts. The token must never show in the output.

molecule/rke2_delegated is for an operator's own VMs and is not run here; only its configuration is checked, with
molecule's syntax step."""

import json
import os
import re
import subprocess

import pytest

from .molecule_run import check_step_changes, run_scenario, steps_run
from .slurm_harness import ROOT

HOSTS = ("mol-rke2-s1", "mol-rke2-a1")


@pytest.mark.hosts
@pytest.mark.slow
def test_molecule_scenario_rke2(tmp_path, monkeypatch):
    token_file = tmp_path / "rke2_token"  # where prepare writes this run's token, so that it can be looked for
    monkeypatch.setenv("MOLECULE_RKE2_TOKEN_FILE", str(token_file))
    output = run_scenario("rke2")
    ran = steps_run(output, "rke2")
    for step in ("syntax", "create", "prepare", "converge", "idempotence", "check", "verify", "side_effect"):
        assert step in ran, f"molecule did not run the {step} step: {ran}"
    assert ran[-1] == "destroy", ran
    # Under --check, the converged cluster needs no change, on either node.
    changed = check_step_changes(output, "rke2")
    assert {host for host, _ in changed} >= set(HOSTS), changed
    assert all(n == "0" for _, n in changed), f"--check would change something: {changed}"
    for host in HOSTS:
        assert f"Nothing left on {host}." in output
    token = token_file.read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", token), "prepare did not generate a 64-hex token"
    assert token not in output, "the cluster token appeared in the scenario's output"


def test_delegated_scenario_configuration(tmp_path):
    """molecule/rke2_delegated's molecule.yml, its links to the operator's inventory and token and the shared
    converge playbook, through molecule's syntax step; unset, the inventory variable stops molecule by name."""
    inventory = tmp_path / "inventory.yml"  # JSON is YAML
    inventory.write_text(json.dumps({"all": {"children": {
        "rke2_servers": {"hosts": {"vm-s1": {"ansible_host": "192.0.2.11"}}},
        "rke2_agents": {"hosts": {"vm-a1": {"ansible_host": "192.0.2.21"}}}}}}))
    token = tmp_path / "token"
    token.write_text("0" * 64)
    molecule = str(ROOT / ".venv/bin/molecule")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAAS_RKE2_")}
    env.update(NO_COLOR="1", ANSIBLE_NOCOLOR="1")

    def syntax(**extra) -> subprocess.CompletedProcess:
        return subprocess.run([molecule, "syntax", "-s", "rke2_delegated"], cwd=ROOT, env={**env, **extra},
                              capture_output=True, text=True, timeout=300, check=False)

    unset = syntax()
    assert unset.returncode != 0
    assert "GPUAAS_RKE2_INVENTORY is not set' does not exist" in unset.stdout + unset.stderr, unset.stderr[-2000:]
    ok = syntax(GPUAAS_RKE2_INVENTORY=str(inventory), GPUAAS_RKE2_TOKEN_FILE=str(token))
    assert ok.returncode == 0, (ok.stdout + ok.stderr)[-4000:]
    assert "playbook: " + str(ROOT / "molecule/rke2/converge.yml") in ok.stdout + ok.stderr

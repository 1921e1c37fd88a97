"""gpuaas.apps.slurm_worker's facts (tasks/facts.yml) evaluated twice in one run give the same node definition,
with each GPU's device minor number (gpu_minors) beside the count.

This machine has no GPU, so a TEST DOUBLE stands in for nvidia-smi only: a script that prints, for
`nvidia-smi -q -x`, a report derived from a real H100's (tests/unit/plugins/fixtures): two GPUs with the minor
numbers 0 and 2, as on a host where the GPU with minor 1 fell off the bus. The role, its variables,
gpuaas.apps.host_facts and ansible-playbook are real.
"""

import json
import shlex

from .ansible_run import PLAYBOOKS, ROOT, local_inventory, run_playbook

HOLE_REPORT = ROOT / "tests/unit/plugins/fixtures/nvidia-smi-q-x-h100-minors-0-2.xml"
NVIDIA_SMI_DOUBLE = f"""#!/bin/sh
# Test double for nvidia-smi (no GPU on the test machine): two H100s, minors 0 and 2, for -q -x only.
[ "$*" = "-q -x" ] || {{ echo "called with: $*" >&2; exit 64; }}
cat {shlex.quote(str(HOLE_REPORT))}
"""


def facts_twice(tmp_path, **host_vars):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(NVIDIA_SMI_DOUBLE)
    smi.chmod(0o755)
    out = tmp_path / "facts.json"
    # Hardware given, not gathered: only the GPUs are under test.
    inventory = local_inventory(tmp_path / "hosts.ini", {"slurm_workers": ["gpu1"]}, {
        "slurm_worker_nvidia_smi": str(smi), "slurm_worker_cpus": 8, "slurm_worker_real_memory": 64000,
        "slurm_worker_addr": "192.0.2.10", **host_vars})
    rc, output = run_playbook(PLAYBOOKS / "worker_facts_twice.yml", inventory, {"facts_out": str(out)})
    assert rc == 0, output[-3000:]
    return json.loads(out.read_text())


def test_a_second_evaluation_keeps_the_gpus_and_their_minor_numbers(tmp_path):
    written = facts_twice(tmp_path)
    expected = {"name": "gpu1", "addr": "192.0.2.10", "cpus": 8, "real_memory": 64000, "features": [], "gpus": 2,
                "gpu_minors": [0, 2]}
    assert written["first"] == expected
    assert written["second"] == expected, "the second evaluation of the facts changed the node definition"


def test_a_gpu_count_given_means_minors_0_to_n_minus_1(tmp_path):
    """No detection: the nvidia-smi double (minors 0 and 2) is not asked."""
    written = facts_twice(tmp_path, slurm_worker_gpus=3)
    assert written["first"]["gpus"] == 3 and written["first"]["gpu_minors"] == [0, 1, 2], written
    assert written["second"] == written["first"]


def test_a_node_without_gpus_is_described_as_older_versions_described_it(tmp_path):
    """No gpu_minors key: the controller's node registry does not change (and slurmctld does not restart) for a
    node without GPUs when a deploy after an upgrade describes it again."""
    written = facts_twice(tmp_path, slurm_worker_gpus=0)
    assert written["first"] == {"name": "gpu1", "addr": "192.0.2.10", "cpus": 8, "real_memory": 64000,
                                "features": [], "gpus": 0}, written
